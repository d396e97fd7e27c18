"""The Exec Agent's entry point: flags, logging, the API server client, flintlockd, then serve.

    exec-agent --host-node=$(NODE_NAME) --address=$(HOST_IP) \
        --tls-cert-file=... --tls-key-file=... \
        --flintlockd-ca-file=... --flintlockd-cert-file=... --flintlockd-key-file=...

With `--trust-domain=<td>` instead of the five certificate files, the agent makes its keys and
gets its three certificates by CSR before it serves, and renews them while it runs (`certs`,
EA-060..EA-068).

First checks that its own identity names its Host (`identity`, EA-050), then runs three things
until SIGTERM or SIGINT: the exec API (`server`), the Node report (`node_report`, every
`--sync-interval`) and the drain guard (`drain_guard`: while claims are Bound here, a drain of
the Node waits, at most `--drain-timeout`; EA-040, EA-041). Exits 2 with one line per problem on bad flags, including a flintlockd
endpoint or a serving address that is not this Host's (EA-001, EA-002); 1 when its identity
names another Host or none; 0 after a signal once running execs had their grace period. With
`--health-probe-bind-address`, `/healthz` is the event loop answering, `/readyz` the exec API
listening, no long-lived task down and, with `--trust-domain`, every certificate far enough from
its expiry (EA-103), and `/metrics` the agent's metrics.

Every long-lived task runs under an `obs.supervisor.Supervisor` (DP-107): the Node report and
the drain guard under the agent's, the guard's two watches under the guard's, the
certificates' watch, follower and renewals under their own (`certs.TASKS`, whose backoff is the
renewals' retry). One that fails is logged with its traceback, named in `/readyz` while it is
down, and started again with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Mapping, Sequence

from prometheus_client import CollectorRegistry

from batteryop.exec_agent.auth import Authorizer
from batteryop.exec_agent.certs import AgentCertificates
from batteryop.exec_agent.config import AgentConfig, AgentConfigError, parse
from batteryop.exec_agent.drain_guard import DrainGuard
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.identity import IdentityError, check_identity
from batteryop.exec_agent.metrics import AgentMetrics
from batteryop.exec_agent.node_report import NodeReporter
from batteryop.exec_agent.server import (
    AgentServer,
    AgentServerError,
    failed_auth_limiter,
    identity_limiter,
)
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import KubeConfigError
from batteryop.obs.addresses import parse_bind_address
from batteryop.obs.health import Check, HealthServer
from batteryop.obs.process import run_deployable
from batteryop.obs.supervisor import Supervisor

log = logging.getLogger("batteryop.exec_agent")

USER_AGENT = "battery-operator-exec-agent"

NODE_REPORT_TASK = "node-report"
DRAIN_GUARD_TASK = "drain-guard"
TASKS = (NODE_REPORT_TASK, DRAIN_GUARD_TASK)
"""The agent's own long-lived tasks (the certificates' are `certs.TASKS`)."""


async def run(config: AgentConfig, stop: asyncio.Event) -> None:
    """Serve until `stop` is set."""
    kube_config = (
        KubeConfig.from_kubeconfig(str(config.kubeconfig))
        if config.kubeconfig
        else KubeConfig.load()
    )
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    health_at = parse_bind_address(
        config.health_probe_bind_address, flag="--health-probe-bind-address"
    )
    # Filled in as the agent comes up; /healthz answers from the start (waiting for a signer
    # can take a while), /readyz only once everything below runs.
    server: AgentServer | None = None
    supervisor = Supervisor()  # DP-107
    for task in TASKS:
        supervisor.add(task)
    health: HealthServer | None = None
    async with contextlib.AsyncExitStack() as stack:
        if health_at is not None:
            health = HealthServer(
                *health_at,
                checks={
                    "exec-api": lambda: server is not None and server.port != 0,
                    **supervisor.checks(),
                },
                liveness_checks={"loop": lambda: True},
                metrics_registry=registry,
            )
            await health.start()
            stack.push_async_callback(health.stop)
        kube = await stack.enter_async_context(
            KubeClient(
                kube_config, timeout=config.call_timeout.total_seconds(), user_agent=USER_AGENT
            )
        )
        await check_identity(kube, config.node_name)  # EA-050: before anything is served
        certs: AgentCertificates | None = None
        flintlockd: Flintlockd | None = None

        def client_renewed() -> None:
            if certs is not None and flintlockd is not None:
                flintlockd.use_credentials(certs.client_credentials())

        if config.trust_domain:  # EA-060..EA-068: keys made here, certificates by CSR
            certs = AgentCertificates(
                kube,
                node=config.node_name,
                trust_domain=config.trust_domain,
                address=config.address,
                namespace=config.namespace,
                cert_dir=config.flintlockd_cert_dir,
                ca_bundle_config_map=config.ca_bundle_config_map,
                duration=config.certificate_duration,
                on_client_renewed=client_renewed,
            )
            stack.push_async_callback(certs.aclose)
            metrics.follow_certificates(certs)  # EA-104
            _add_checks(health, certs.checks())  # EA-103, DP-107
            log.info("Obtaining certificates by CSR")
            if not await _unless_stopped(certs.start(), stop):
                return
        flintlockd = await stack.enter_async_context(
            Flintlockd.connect(config, certs.client_credentials() if certs else None)
        )
        authorizer = Authorizer(
            kube,
            node_name=config.node_name,
            audience=config.token_audience,
            observer=metrics,
            limiter=failed_auth_limiter(config),  # EA-105
            identities=identity_limiter(config),  # EA-120, EA-121
        )
        server = AgentServer(
            config,
            authorizer=authorizer,
            flintlockd=flintlockd,
            observer=metrics,
            credentials=certs.server_credentials() if certs else None,
            refusals=metrics,
        )
        reporter = NodeReporter(
            kube,
            node_name=config.node_name,
            agent_address=config.agent_address,
            flintlockd_address=config.flintlockd,
            paths=config.host_paths,
            server_info=flintlockd.server_info,
            interval=config.sync_interval.total_seconds(),
            resync=config.report_resync.total_seconds(),
        )
        guard = DrainGuard(  # EA-040, EA-041
            kube,
            node_name=config.node_name,
            namespace=config.guard_namespace,
            image=config.guard_image,
            timeout=config.drain_timeout,
            linger=config.drain_guard_linger,  # EA-042
        )
        metrics.follow_drain_guard(guard)
        _add_checks(health, guard.watches.checks())  # DP-107
        metrics.follow_streams(server.streams)  # EA-105
        _add_checks(health, server.tasks.checks())  # EA-106: the claims watch, DP-107
        await server.start()
        stack.push_async_callback(server.stop)
        supervisor.start(NODE_REPORT_TASK, lambda: reporter.run(stop))
        supervisor.start(DRAIN_GUARD_TASK, lambda: guard.run(stop))
        # On the way out, in turn: these tasks, the server, the certificates' tasks, the
        # health server.
        stack.push_async_callback(supervisor.stop)
        await stop.wait()


def _add_checks(health: HealthServer | None, checks: Mapping[str, Check]) -> None:
    if health is not None:
        for name, check in checks.items():
            health.add_readiness_check(name, check)


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run `work` unless `stop` is set first (then cancel it); whether it finished."""
    job = asyncio.ensure_future(work)
    halt = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({job, halt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        halt.cancel()
    if job.done():
        job.result()
        return True
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
    return False


def main(argv: Sequence[str] | None = None) -> int:
    return run_deployable(
        "exec-agent",
        argv,
        parse=parse,
        run=run,
        config_errors=(AgentConfigError,),  # one line per problem
        fatal={
            AgentConfigError: 2,
            KubeConfigError: 2,
            AgentServerError: 2,
            ValueError: 2,
            IdentityError: 1,
        },
        log=log,
    )


if __name__ == "__main__":
    sys.exit(main())
