"""The operator's Prometheus metrics (DP-102), on a registry each process (or test) creates.

Nothing here touches `prometheus_client.REGISTRY`: an entry point creates a
`CollectorRegistry`, builds `OperatorMetrics` on it and hands the registry to the metrics
server (`batteryop.obs.health`). Label sets are kept small and bounded (phase, RPC name, gRPC
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
from batteryop.obs.catalog import Kind, MetricDef

NAMESPACE = "battery_operator"

LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
)
"""Seconds, 5 ms to 60 s; slower observations land in ``+Inf``."""

OK_CODE = "OK"

_PHASES = frozenset(phase.value for phase in ClaimPhase)


CLAIMS_BY_PHASE = MetricDef(
    NAMESPACE,
    "claims_by_phase",
    Kind.GAUGE,
    "MicroVMClaims the operator sees, by status phase.",
    ("phase",),
)
CLAIM_BIND_SECONDS = MetricDef(
    NAMESPACE,
    "claim_bind_seconds",
    Kind.HISTOGRAM,
    "Seconds from a MicroVMClaim's creation to its phase becoming Bound.",
    buckets=LATENCY_BUCKETS,
)
BATTERY_CALL_SECONDS = MetricDef(
    NAMESPACE,
    "battery_call_seconds",
    Kind.HISTOGRAM,
    "Seconds per battery call, by RPC and gRPC status code "
    "(Subscribe: how long an Events stream stayed open).",
    ("rpc", "code"),
    LATENCY_BUCKETS,
)
BATTERY_CALL_ERRORS = MetricDef(
    NAMESPACE,
    "battery_call_errors",
    Kind.COUNTER,
    "Battery calls that ended with a gRPC status other than OK.",
    ("rpc", "code"),
)
RECONCILE = MetricDef(
    NAMESPACE,
    "reconcile",
    Kind.COUNTER,
    "Reconciles, by controller and result.",
    ("controller", "result"),
)
RECONCILE_SECONDS = MetricDef(
    NAMESPACE,
    "reconcile_seconds",
    Kind.HISTOGRAM,
    "Seconds per reconcile, by controller.",
    ("controller",),
    LATENCY_BUCKETS,
)
WORKQUEUE_DEPTH = MetricDef(
    NAMESPACE,
    "workqueue_depth",
    Kind.GAUGE,
    "Keys waiting in a controller's work queue.",
    ("controller",),
)
BATTERY_SUBSCRIBED = MetricDef(
    NAMESPACE,
    "battery_subscribed",
    Kind.GAUGE,
    "1 while the battery Events stream is open, else 0.",
)
CLAIM_PENDING_OLDEST_SECONDS = MetricDef(
    NAMESPACE,
    "claim_pending_oldest_seconds",
    Kind.GAUGE,
    "Seconds the oldest MicroVMClaim not yet Bound (no phase, or Pending) has waited since "
    "this operator first saw it; 0 when none waits.",
)
POOLS_EXHAUSTED = MetricDef(
    NAMESPACE,
    "pools_exhausted",
    Kind.GAUGE,
    "Pools whose Exhausted condition is True: a size above 0 and no MicroVM available.",
)
HOSTS_NOT_READY = MetricDef(
    NAMESPACE,
    "hosts_not_ready",
    Kind.GAUGE,
    "Host Nodes (labelled as Hosts) whose Exec Agent report is missing or not ready.",
)
CACHE_ENTRIES = MetricDef(
    NAMESPACE,
    "cache_entries",
    Kind.GAUGE,
    "Entries each of the operator's in-memory maps holds.",
    ("map",),
)


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
