from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from batteryop.obs import catalog, exported
from batteryop.obs.catalog import Kind, MetricDef

REQUESTS = MetricDef("ns", "requests_total", Kind.COUNTER, "Requests | by outcome.", ("outcome",))
ERRORS = MetricDef("ns", "errors", Kind.COUNTER, "Errors.")
WAIT = MetricDef("ns", "wait_seconds", Kind.HISTOGRAM, "Waits.", buckets=(0.5, 1.0))
UP = MetricDef("ns", "up", Kind.GAUGE, "1 while up.")


@pytest.mark.parametrize(
    ("definition", "family"),
    [
        pytest.param(REQUESTS, "ns_requests_total", id="counter named with _total"),
        pytest.param(ERRORS, "ns_errors_total", id="counter named without _total"),
        pytest.param(WAIT, "ns_wait_seconds", id="histogram"),
        pytest.param(UP, "ns_up", id="gauge"),
    ],
)
def test_the_family_name_is_the_one_scraped(definition: MetricDef, family: str) -> None:
    registry = CollectorRegistry()
    made = getattr(definition, definition.kind.value)(registry)
    if definition.labels:
        made = made.labels("ok")
    if definition.kind is Kind.HISTOGRAM:
        made.observe(0.7)
    elif definition.kind is Kind.COUNTER:
        made.inc()
    assert definition.family == family
    samples = {s.name for m in registry.collect() for s in m.samples}
    expected = {
        Kind.COUNTER: family,
        Kind.GAUGE: family,
        Kind.HISTOGRAM: f"{family}_count",
    }[definition.kind]
    assert expected in samples


def test_histogram_buckets_are_the_definitions() -> None:
    registry = CollectorRegistry()
    WAIT.histogram(registry).observe(0.7)
    bounds = {s.labels["le"] for m in registry.collect() for s in m.samples if "le" in s.labels}
    assert bounds == {"0.5", "1.0", "+Inf"}


def test_a_metric_is_made_only_as_its_kind() -> None:
    with pytest.raises(TypeError, match="ns_up is a gauge, not a counter"):
        UP.counter(CollectorRegistry())


def test_gauge_family_carries_the_definition() -> None:
    family = MetricDef("ns", "left", Kind.GAUGE, "Left.", ("certificate",)).gauge_family()
    family.add_metric(["serving"], 3.0)
    assert (family.name, family.documentation, family.type) == ("ns_left", "Left.", "gauge")
    assert family.samples[0].labels == {"certificate": "serving"}


def test_every_exported_metric_has_one_family_name() -> None:
    families = [d.family for d in exported.ALL]
    assert len(families) > 30
    assert len(set(families)) == len(families), "two definitions export one family"


def test_reference_is_a_table_per_component() -> None:
    text = catalog.reference([("Operator", [UP, REQUESTS])])
    lines = text.splitlines()
    assert lines[0] == "## Operator"
    assert lines[4] == "| `ns_requests_total` | counter | `outcome` | Requests \\| by outcome. |"
    assert lines[5] == "| `ns_up` | gauge | — | 1 while up. |"
