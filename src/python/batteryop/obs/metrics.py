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

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from batteryop.api.conditions import ClaimPhase

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


class OperatorMetrics:
    """Every metric the operator exports, registered on `registry`.

    The attributes are the `prometheus_client` metrics themselves; the methods are the
    operations the controllers need, so callers rarely touch label plumbing.
    """

    def __init__(self, registry: CollectorRegistry, *, namespace: str = NAMESPACE) -> None:
        self.registry = registry
        self.namespace = namespace
        self.claims_by_phase = Gauge(
            "claims_by_phase",
            "MicroVMClaims the operator sees, by status phase.",
            ["phase"],
            namespace=namespace,
            registry=registry,
        )
        self.claim_bind_seconds = Histogram(
            "claim_bind_seconds",
            "Seconds from a MicroVMClaim's creation to its phase becoming Bound.",
            namespace=namespace,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.battery_call_seconds = Histogram(
            "battery_call_seconds",
            "Seconds per battery call, by RPC and gRPC status code "
            "(Subscribe: how long an Events stream stayed open).",
            ["rpc", "code"],
            namespace=namespace,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.battery_call_errors_total = Counter(
            "battery_call_errors",
            "Battery calls that ended with a gRPC status other than OK.",
            ["rpc", "code"],
            namespace=namespace,
            registry=registry,
        )
        self.reconcile_total = Counter(
            "reconcile",
            "Reconciles, by controller and result.",
            ["controller", "result"],
            namespace=namespace,
            registry=registry,
        )
        self.reconcile_seconds = Histogram(
            "reconcile_seconds",
            "Seconds per reconcile, by controller.",
            ["controller"],
            namespace=namespace,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth",
            "Keys waiting in a controller's work queue.",
            ["controller"],
            namespace=namespace,
            registry=registry,
        )
        self.battery_subscribed = Gauge(
            "battery_subscribed",
            "1 while the battery Events stream is open, else 0.",
            namespace=namespace,
            registry=registry,
        )
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

    def report_sizes(self, read: Callable[[], Mapping[str, int]]) -> None:
        """Export `read()` as `cache_entries{map=...}`, read at every scrape. The map names
        are a fixed set (the operator's own maps), never object names."""
        self.registry.register(_SizesCollector(f"{self.namespace}_cache_entries", read))


class _SizesCollector(Collector):
    """Entries per map of the operator, read when scraped (no bookkeeping between scrapes)."""

    def __init__(self, name: str, read: Callable[[], Mapping[str, int]]) -> None:
        self._name = name
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            self._name, "Entries each of the operator's in-memory maps holds.", labels=["map"]
        )
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
