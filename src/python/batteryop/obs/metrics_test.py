import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

from batteryop.api.conditions import ClaimPhase
from batteryop.battery.observer import CallObserver, notify
from batteryop.obs.exported.operator import LATENCY_BUCKETS, NAMESPACE
from batteryop.obs.metrics import BatteryCallMetrics, OperatorMetrics


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(f"{NAMESPACE}_{name}", labels)


def test_metrics_live_on_the_given_registry_only() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    OperatorMetrics(first).set_battery_subscribed(True)
    OperatorMetrics(second)  # a second set on another registry does not clash
    assert _value(first, "battery_subscribed") == 1.0
    assert _value(second, "battery_subscribed") == 0.0
    assert prometheus_client.REGISTRY.get_sample_value(f"{NAMESPACE}_battery_subscribed") is None


def test_every_claim_phase_is_exported_from_the_start_and_missing_phases_read_zero() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    for phase in ClaimPhase:
        assert _value(registry, "claims_by_phase", phase=phase.value) == 0.0

    metrics.set_claims_by_phase({ClaimPhase.PENDING.value: 3, ClaimPhase.BOUND.value: 5})
    assert _value(registry, "claims_by_phase", phase="Pending") == 3.0
    assert _value(registry, "claims_by_phase", phase="Bound") == 5.0

    metrics.set_claims_by_phase({ClaimPhase.BOUND.value: 4})
    assert _value(registry, "claims_by_phase", phase="Pending") == 0.0
    assert _value(registry, "claims_by_phase", phase="Bound") == 4.0
    assert _value(registry, "claims_by_phase", phase="Expired") == 0.0


def test_claim_bind_latency_buckets_run_from_5ms_to_60s() -> None:
    assert LATENCY_BUCKETS[0] == 0.005
    assert LATENCY_BUCKETS[-1] == 60.0
    assert list(LATENCY_BUCKETS) == sorted(LATENCY_BUCKETS)
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.observe_claim_bound(0.004)
    metrics.observe_claim_bound(2.0)
    metrics.observe_claim_bound(90.0)
    assert _value(registry, "claim_bind_seconds_bucket", le="0.005") == 1.0
    assert _value(registry, "claim_bind_seconds_bucket", le="2.5") == 2.0
    assert _value(registry, "claim_bind_seconds_bucket", le="60.0") == 2.0
    assert _value(registry, "claim_bind_seconds_bucket", le="+Inf") == 3.0
    assert _value(registry, "claim_bind_seconds_count") == 3.0


@pytest.mark.req("DP-102")
def test_the_call_observer_adapter_records_latency_and_counts_only_non_ok_codes() -> None:
    registry = CollectorRegistry()
    observer: CallObserver = BatteryCallMetrics(OperatorMetrics(registry))

    notify(observer, "ClaimVM", "OK", 0.02)
    notify(observer, "ClaimVM", "OK", 0.03)
    notify(observer, "ClaimVM", "RESOURCE_EXHAUSTED", 0.01)
    notify(observer, "Heartbeat", "UNAVAILABLE", 1.5)
    notify(observer, "Heartbeat", "UNAVAILABLE", 0.5)

    assert _value(registry, "battery_call_seconds_count", rpc="ClaimVM", code="OK") == 2.0
    assert _value(registry, "battery_call_seconds_sum", rpc="ClaimVM", code="OK") == (
        pytest.approx(0.05)
    )
    assert _value(registry, "battery_call_errors_total", rpc="ClaimVM", code="OK") is None
    assert (
        _value(registry, "battery_call_errors_total", rpc="ClaimVM", code="RESOURCE_EXHAUSTED")
        == 1.0
    )
    assert _value(registry, "battery_call_errors_total", rpc="Heartbeat", code="UNAVAILABLE") == 2.0
    assert (
        _value(
            registry, "battery_call_seconds_bucket", rpc="Heartbeat", code="UNAVAILABLE", le="1.0"
        )
        == 1.0
    )


@pytest.mark.req("DP-102")
def test_reconcile_workqueue_and_subscription_metrics() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.observe_reconcile("claims", "success", 0.2)
    metrics.observe_reconcile("claims", "error", 0.4)
    metrics.observe_reconcile("pools", "success", 0.1)
    metrics.set_workqueue_depth("claims", 7)
    metrics.set_battery_subscribed(True)
    metrics.set_battery_subscribed(False)

    assert _value(registry, "reconcile_total", controller="claims", result="success") == 1.0
    assert _value(registry, "reconcile_total", controller="claims", result="error") == 1.0
    assert _value(registry, "reconcile_seconds_count", controller="claims") == 2.0
    assert _value(registry, "reconcile_seconds_sum", controller="claims") == pytest.approx(0.6)
    assert _value(registry, "workqueue_depth", controller="claims") == 7.0
    assert _value(registry, "battery_subscribed") == 0.0
