"""The agent's Prometheus metrics, on a registry its entry point creates.

`exec_agent_phase_seconds{phase}`: how long calls spent in each `timing.Phase` (TokenReview,
claim read, opening the stream on flintlockd, the command), so a slow exec can be blamed on the
API server, flintlockd or the command. Labels are bounded: no user, claim or MicroVM names.

`exec_agent_refusals_total{check, code}` (EA-105): calls the agent refused, and running streams
it ended, by the check that failed (`errors.Check`) and the gRPC code; a `RefusalObserver`.
`exec_agent_streams` (running exec streams) comes from `follow_streams`.

`exec_agent_drain_guard_held` (1 while the drain guard is in place, EA-040) and
`exec_agent_bound_claims` (claims Bound on this Host, as the guard last saw them).

`exec_agent_certificate_expiry_seconds{certificate}` (EA-104): seconds until each certificate
the agent holds expires, negative once it has; one series per certificate obtained so far
(`certs.KINDS`), read at each scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from batteryop.exec_agent.certs import AgentCertificates
from batteryop.exec_agent.drain_guard import DrainGuard
from batteryop.exec_agent.errors import Check
from batteryop.exec_agent.streams import ClaimStreams
from batteryop.exec_agent.timing import Phase
from batteryop.obs.exported.exec_agent import (
    BOUND_CLAIMS,
    CERTIFICATE_EXPIRY,
    DRAIN_GUARD_HELD,
    PHASE_SECONDS,
    REFUSALS,
    STREAMS,
)


class AgentMetrics:
    """Every metric the agent exports; a `timing.PhaseObserver`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.phase_seconds = PHASE_SECONDS.histogram(registry)
        self.refusals = REFUSALS.counter(registry)

    def observe_phase(self, phase: Phase, seconds: float) -> None:
        self.phase_seconds.labels(phase=phase.value).observe(seconds)

    def observe_refusal(self, check: Check, code: grpc.StatusCode) -> None:
        """EA-105: one refused call (or ended stream), by check and code."""
        self.refusals.labels(check=check.value, code=code.name).inc()

    def follow_streams(self, streams: ClaimStreams) -> None:
        """Export how many exec streams run, read at each scrape (EA-105)."""
        running = STREAMS.gauge(self.registry)
        running.set_function(lambda: float(streams.running))

    def follow_drain_guard(self, guard: DrainGuard) -> None:
        """Export the guard's state, read at each scrape."""
        held = DRAIN_GUARD_HELD.gauge(self.registry)
        held.set_function(lambda: 1.0 if guard.held else 0.0)
        bound = BOUND_CLAIMS.gauge(self.registry)
        bound.set_function(lambda: float(len(guard.bound_claims)))

    def follow_certificates(self, certs: AgentCertificates) -> None:
        """Export the seconds left to each certificate, read at each scrape (EA-104)."""
        self.registry.register(_SecondsLeft(certs.seconds_left))


class _SecondsLeft(Collector):
    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CERTIFICATE_EXPIRY.gauge_family()
        for kind, seconds in sorted(self._read().items()):
            family.add_metric([kind], seconds)
        yield family
