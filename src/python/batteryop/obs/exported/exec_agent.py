"""The Exec Agent's metrics (EA-104, EA-105), defined once; `exec_agent.metrics` makes them."""

from __future__ import annotations

from batteryop.obs.catalog import Kind, MetricDef

NAMESPACE = "battery_operator"

PHASE_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
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
    60.0,
    600.0,
)
"""Seconds, 0.5 ms (a claim read on a quiet API server) to 10 min (a long command)."""


PHASE_SECONDS = MetricDef(
    NAMESPACE,
    "exec_agent_phase_seconds",
    Kind.HISTOGRAM,
    "Time exec API calls spent in each phase.",
    ("phase",),
    PHASE_BUCKETS,
)
REFUSALS = MetricDef(
    NAMESPACE,
    "exec_agent_refusals",
    Kind.COUNTER,
    "Exec API calls refused, and running exec streams ended, by check and code.",
    ("check", "code"),
)
STREAMS = MetricDef(
    NAMESPACE, "exec_agent_streams", Kind.GAUGE, "Exec streams running on this agent."
)
DRAIN_GUARD_HELD = MetricDef(
    NAMESPACE,
    "exec_agent_drain_guard_held",
    Kind.GAUGE,
    "1 while the drain guard holds drains of this Host's Node open.",
)
BOUND_CLAIMS = MetricDef(
    NAMESPACE,
    "exec_agent_bound_claims",
    Kind.GAUGE,
    "MicroVMClaims Bound on this Host, as the drain guard last saw them.",
)
CERTIFICATE_EXPIRY = MetricDef(
    NAMESPACE,
    "exec_agent_certificate_expiry_seconds",
    Kind.GAUGE,
    "Seconds until each certificate of the agent expires, negative once it has.",
    ("certificate",),
)

DEFINED = (
    PHASE_SECONDS,
    REFUSALS,
    STREAMS,
    DRAIN_GUARD_HELD,
    BOUND_CLAIMS,
    CERTIFICATE_EXPIRY,
)
"""In the order the reference lists them."""
