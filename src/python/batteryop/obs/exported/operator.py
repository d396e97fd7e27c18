"""The operator's metrics (DP-102): names, types, labels and meaning, defined once.

`batteryop.obs.metrics.OperatorMetrics` makes them; the alerts, the dashboard and the metrics
reference name them from here.
"""

from __future__ import annotations

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
    "Host Nodes (labelled as Hosts) whose Exec Agent report is missing or not ready, or whose "
    "own Ready condition is not True.",
)
CACHE_ENTRIES = MetricDef(
    NAMESPACE,
    "cache_entries",
    Kind.GAUGE,
    "Entries each of the operator's in-memory maps holds.",
    ("map",),
)

DEFINED = (
    CLAIMS_BY_PHASE,
    CLAIM_BIND_SECONDS,
    BATTERY_CALL_SECONDS,
    BATTERY_CALL_ERRORS,
    RECONCILE,
    RECONCILE_SECONDS,
    WORKQUEUE_DEPTH,
    BATTERY_SUBSCRIBED,
    CLAIM_PENDING_OLDEST_SECONDS,
    POOLS_EXHAUSTED,
    HOSTS_NOT_READY,
    CACHE_ENTRIES,
)
"""In the order the reference lists them."""
