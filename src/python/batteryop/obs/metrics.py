"""The operator's Prometheus metrics (DP-102), on a registry each process (or test) creates.

Nothing here touches `prometheus_client.REGISTRY`: an entry point creates a
`CollectorRegistry`, builds `OperatorMetrics` on it and hands the registry to the metrics
server (`batteryop.obs.health`). The metrics are defined in `batteryop.obs.exported.operator`. Label sets are kept small and bounded (phase, RPC name, gRPC
code name, controller name, result); object names and namespaces are never labels.

`BatteryCallMetrics` is the battery client's `CallObserver` (`batteryop.battery.observer`):
it turns each finished battery call into the call-latency histogram and, for codes other
than ``OK``, the error counter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from batteryop.api.conditions import ClaimPhase
from batteryop.obs.catalog import MetricDef
from batteryop.obs.exported.operator import (
    BATTERY_CALL_ERRORS,
    BATTERY_CALL_SECONDS,
    BATTERY_SUBSCRIBED,
    CACHE_ENTRIES,
    CLAIM_BIND_SECONDS,
    CLAIMS_BY_PHASE,
    RECONCILE,
    RECONCILE_SECONDS,
    WORKQUEUE_DEPTH,
)

OK_CODE = "OK"

_PHASES = frozenset(phase.value for phase in ClaimPhase)


class OperatorMetrics:
    """Every metric the operator exports, registered on `registry`.

    The attributes are the `prometheus_client` metrics themselves; the methods are the
    operations the controllers need, so callers rarely touch label plumbing.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.claims_by_phase = CLAIMS_BY_PHASE.gauge(registry)
        self.claim_bind_seconds = CLAIM_BIND_SECONDS.histogram(registry)
        self.battery_call_seconds = BATTERY_CALL_SECONDS.histogram(registry)
        self.battery_call_errors_total = BATTERY_CALL_ERRORS.counter(registry)
        self.reconcile_total = RECONCILE.counter(registry)
        self.reconcile_seconds = RECONCILE_SECONDS.histogram(registry)
        self.workqueue_depth = WORKQUEUE_DEPTH.gauge(registry)
        self.battery_subscribed = BATTERY_SUBSCRIBED.gauge(registry)
        for phase in ClaimPhase:  # every phase is a series from the start, at 0
            self.claims_by_phase.labels(phase=phase.value).set(0)

    def set_claims_by_phase(self, counts: Mapping[str, int]) -> None:
        """Replace the per-phase claim counts; a known phase missing from `counts` reads 0."""
        for phase in ClaimPhase:
            self.claims_by_phase.labels(phase=phase.value).set(counts.get(phase.value, 0))
        for phase_name, count in counts.items():
            if phase_name not in _PHASES:
                self.claims_by_phase.labels(phase=phase_name).set(count)

    def observe_claim_bound(self, seconds: float) -> None:
        """A claim reached Bound `seconds` after its creation."""
        self.claim_bind_seconds.observe(max(seconds, 0.0))

    def observe_battery_call(self, rpc: str, code: str, seconds: float) -> None:
        self.battery_call_seconds.labels(rpc=rpc, code=code).observe(max(seconds, 0.0))
        if code != OK_CODE:
            self.battery_call_errors_total.labels(rpc=rpc, code=code).inc()

    def observe_reconcile(self, controller: str, result: str, seconds: float) -> None:
        """One reconcile by `controller` ended with `result` (e.g. ``success``, ``error``)."""
        self.reconcile_total.labels(controller=controller, result=result).inc()
        self.reconcile_seconds.labels(controller=controller).observe(max(seconds, 0.0))

    def set_workqueue_depth(self, controller: str, depth: int) -> None:
        self.workqueue_depth.labels(controller=controller).set(depth)

    def set_battery_subscribed(self, subscribed: bool) -> None:
        self.battery_subscribed.set(1 if subscribed else 0)

    def follow(self, definition: MetricDef, read: Callable[[], float]) -> None:
        """Export the gauge `definition` as `read()`, called at every scrape."""
        definition.gauge(self.registry).set_function(read)

    def report_sizes(self, read: Callable[[], Mapping[str, int]]) -> None:
        """Export `read()` as `cache_entries{map=...}`, read at every scrape. The map names
        are a fixed set (the operator's own maps), never object names."""
        self.registry.register(_SizesCollector(read))


class _SizesCollector(Collector):
    """Entries per map of the operator, read when scraped (no bookkeeping between scrapes)."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CACHE_ENTRIES.gauge_family()
        for name, size in sorted(self._read().items()):
            family.add_metric([name], size)
        yield family


class BatteryCallMetrics:
    """The battery client's `CallObserver`, feeding `battery_call_seconds` and the error count.

    Pass it as the client's observer: ``BatteryClient.connect(config, observer=BatteryCallMetrics(m))``.
    """

    def __init__(self, metrics: OperatorMetrics) -> None:
        self._metrics = metrics

    def on_call(self, rpc: str, code: str, seconds: float) -> None:
        self._metrics.observe_battery_call(rpc, code, seconds)
