"""ClaimMetrics: the time to Bound is observed once per claim, and nothing stays for a claim that
can no longer become Bound."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from batteryop.api.clock import FakeClock
from batteryop.obs.exported.operator import NAMESPACE
from batteryop.obs.metrics import OperatorMetrics
from batteryop.operator.claim_metrics import ClaimMetrics


def claim(name: str, phase: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name}}
    if phase:
        body["status"] = {"phase": phase}
    return body


def bind_count(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(f"{NAMESPACE}_claim_bind_seconds_count")
    return value or 0.0


def phase_gauge(registry: CollectorRegistry, phase: str) -> float | None:
    return registry.get_sample_value(f"{NAMESPACE}_claims_by_phase", {"phase": phase})


def test_pending_then_bound_is_one_observation_and_nothing_kept() -> None:
    registry = CollectorRegistry()
    metrics = ClaimMetrics(OperatorMetrics(registry))
    metrics.observe("ADDED", claim("a", None))
    metrics.observe("MODIFIED", claim("a", "Pending"))
    assert metrics.sizes()["claims:first_seen"] == 1
    metrics.observe("MODIFIED", claim("a", "Bound"))
    metrics.observe("MODIFIED", claim("a", "Bound"))
    assert bind_count(registry) == 1
    assert metrics.sizes() == {"claims:first_seen": 0, "claims:phases": 1}
    assert phase_gauge(registry, "Bound") == 1
    assert phase_gauge(registry, "Pending") == 0


def test_an_expired_claim_keeps_no_first_seen_time() -> None:
    """Found at 10,000 claims: every claim listed Expired after a restart held an entry until
    it was deleted, and was never observed."""
    registry = CollectorRegistry()
    metrics = ClaimMetrics(OperatorMetrics(registry))
    metrics.observe(None, claim("listed-expired", "Expired"))
    metrics.observe("ADDED", claim("b", "Pending"))
    metrics.observe("MODIFIED", claim("b", "Expired"))
    assert metrics.sizes() == {"claims:first_seen": 0, "claims:phases": 2}
    assert bind_count(registry) == 0
    assert phase_gauge(registry, "Expired") == 2


def test_deleted_claims_leave_nothing() -> None:
    registry = CollectorRegistry()
    metrics = ClaimMetrics(OperatorMetrics(registry))
    for i in range(5):
        metrics.observe("ADDED", claim(f"c{i}", "Pending"))
    for i in range(5):
        metrics.observe("DELETED", claim(f"c{i}", "Pending"))
    assert metrics.sizes() == {"claims:first_seen": 0, "claims:phases": 0}
    assert phase_gauge(registry, "Pending") == 0


@pytest.mark.req("DP-108")
def test_the_oldest_pending_age_follows_the_clock_and_the_oldest_claim() -> None:
    clock = FakeClock(monotonic_start=100.0)
    metrics = ClaimMetrics(OperatorMetrics(CollectorRegistry()), clock=clock)
    assert metrics.oldest_pending_seconds() == 0
    metrics.observe("ADDED", claim("old", None))
    clock.advance(30)
    metrics.observe("ADDED", claim("new", "Pending"))
    clock.advance(30)
    assert metrics.oldest_pending_seconds() == 60  # "old", first seen at 100
    metrics.observe("MODIFIED", claim("old", "Bound"))
    assert metrics.oldest_pending_seconds() == 30  # "new" is now the oldest
    metrics.observe("MODIFIED", claim("new", "Expired"))
    assert metrics.oldest_pending_seconds() == 0
