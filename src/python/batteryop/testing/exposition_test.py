"""The test helpers read what prometheus_client writes: a page made by a real registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from batteryop.testing import exposition


def page() -> str:
    registry = CollectorRegistry()
    calls = Counter("calls", "Calls.", ["rpc", "code"], namespace="x", registry=registry)
    calls.labels(rpc="GetPool", code="OK").inc(3)
    calls.labels(rpc="GetPool", code="UNAVAILABLE").inc()
    calls.labels(rpc="ClaimVM", code="OK").inc(5)
    Gauge("depth", "Depth.", namespace="x", registry=registry).set(2)
    Histogram("seconds", "Seconds.", namespace="x", registry=registry).observe(0.5)
    return generate_latest(registry).decode()


def test_a_sample_is_read_by_its_key_as_exposed() -> None:
    text = page()
    # Declared (rpc, code); the page writes the labels by name.
    assert exposition.value(text, 'x_calls_total{code="OK",rpc="GetPool"}') == 3.0
    assert exposition.value(text, 'x_calls_total{rpc="GetPool",code="OK"}') == 0.0
    assert exposition.value(text, "x_depth") == 2.0
    assert exposition.value(text, "x_seconds_count") == 1.0
    assert exposition.value(text, "x_missing") == 0.0
    assert "x_seconds_sum" in exposition.samples(text)


def test_a_total_sums_the_samples_whose_labels_match() -> None:
    text = page()
    assert exposition.total(text, "x_calls_total", rpc="GetPool") == 4.0
    assert exposition.total(text, "x_calls_total", code="OK") == 8.0
    assert exposition.total(text, "x_calls_total") == 9.0
    assert exposition.total(text, "x_calls_total", rpc="DeletePool") == 0.0
