"""The agent's Prometheus metrics, on a registry its entry point creates.

`exec_agent_phase_seconds{phase}`: how long calls spent in each `timing.Phase` (TokenReview,
claim read, opening the stream on flintlockd, the command), so a slow exec can be blamed on the
API server, flintlockd or the command. Labels are bounded: no user, claim or MicroVM names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from batteryop.exec_agent.timing import Phase

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


class AgentMetrics:
    """Every metric the agent exports; a `timing.PhaseObserver`."""

    def __init__(self, registry: CollectorRegistry, *, namespace: str = NAMESPACE) -> None:
        self.registry = registry
        self.phase_seconds = Histogram(
            "exec_agent_phase_seconds",
            "Time exec API calls spent in each phase.",
            ["phase"],
            namespace=namespace,
            registry=registry,
            buckets=PHASE_BUCKETS,
        )

    def observe_phase(self, phase: Phase, seconds: float) -> None:
        self.phase_seconds.labels(phase=phase.value).observe(seconds)
