"""The Node report: the agent's verdict on its Host, published as annotations of its Node.

Every `interval` the `NodeReporter` runs the Host checks (`host_checks.check_host`) and, when the
report changed or `resync` has passed since it last wrote, merge-patches the Node's annotations
(and nothing else of the Node, which the admission policy of EA-051 will insist on):

- `names.EXEC_AGENT_READY_ANNOTATION`: `"true"` or `"false"`;
- `names.EXEC_AGENT_REASON_ANNOTATION`: the first failing check's reason, or `Ready`;
- `names.EXEC_AGENT_MESSAGE_ANNOTATION`: every problem found;
- `names.EXEC_AGENT_ADDRESS_ANNOTATION`: where Holders reach this agent (EA-034);
- `names.FLINTLOCKD_ADDRESS_ANNOTATION`: where battery reaches this Host's flintlockd (EA-035).

The operator turns them into each claim's `HostReady` (CL-050..CL-053). A write that fails is
logged and tried again at the next interval; the loop never stops on an error.

Requirements: EA-034, EA-035 (and, through `host_checks`, EA-030..EA-033).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from batteryop.api import names
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.exec_agent.host_checks import HostPaths, HostReport, ServerInfo, check_host
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import KubeError
from batteryop.kube.resources import NODES

log = logging.getLogger(__name__)


def report_annotations(
    report: HostReport, *, agent_address: str, flintlockd_address: str
) -> dict[str, str]:
    """The Node annotations that carry `report` (see the module docstring)."""
    return {
        names.EXEC_AGENT_READY_ANNOTATION: (
            names.EXEC_AGENT_READY_TRUE if report.ready else names.EXEC_AGENT_READY_FALSE
        ),
        names.EXEC_AGENT_REASON_ANNOTATION: str(report.reason),
        names.EXEC_AGENT_MESSAGE_ANNOTATION: report.message,
        names.EXEC_AGENT_ADDRESS_ANNOTATION: agent_address,  # EA-034
        names.FLINTLOCKD_ADDRESS_ANNOTATION: flintlockd_address,  # EA-035
    }


class NodeReporter:
    """Checks this Host and keeps its Node's report annotations current."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        node_name: str,
        agent_address: str,
        flintlockd_address: str,
        paths: HostPaths,
        server_info: ServerInfo,
        interval: float,
        resync: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._kube = kube
        self._node_name = node_name
        self._agent_address = agent_address
        self._flintlockd_address = flintlockd_address
        self._paths = paths
        self._server_info = server_info
        self._interval = interval
        self._resync = resync
        self._clock = clock
        self._published: dict[str, str] | None = None
        self._published_at = 0.0
        self.last_report: HostReport | None = None
        self.writes = 0

    async def report_once(self) -> HostReport:
        """Check the Host; write the report if it changed or the resync is due."""
        report = await check_host(self._paths, self._server_info)
        self.last_report = report
        annotations = report_annotations(
            report, agent_address=self._agent_address, flintlockd_address=self._flintlockd_address
        )
        due = self._clock.monotonic() - self._published_at >= self._resync
        if annotations == self._published and not due:
            return report
        try:
            await self._kube.patch(
                NODES, self._node_name, {"metadata": {"annotations": annotations}}
            )
        except KubeError as e:
            self._published = None  # write again at the next interval
            log.warning(
                "Could not publish the Node report",
                extra={"node": self._node_name, "reason": e.reason, "status": e.status},
            )
            return report
        if annotations != self._published:
            log.info(
                "Published the Node report",
                extra={"node": self._node_name, "ready": report.ready, "reason": report.reason},
            )
        self._published = annotations
        self._published_at = self._clock.monotonic()
        self.writes += 1
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Report every interval until `stop` is set."""
        while not stop.is_set():
            try:
                await self.report_once()
            except Exception:  # a bug in a check must not end the reports
                log.exception("Host check failed", extra={"node": self._node_name})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await stop.wait()
