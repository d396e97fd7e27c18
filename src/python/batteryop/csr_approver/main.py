"""The CSR approver's entry point: flags, logging, the kube client, probes, metrics, then run.

    csr-approver --trust-domain=battery.liquidmetal-x.dev --namespace=battery-operator-system

Exits 2 with one line naming the flag on a bad setting, a missing `--trust-domain` included
(CT-020); 0 after SIGTERM or SIGINT. Readiness (`/readyz`) is true once the requests are listed
and the three CAs are loaded, while none of the approver's supervised watches and queues is down
(DP-107); liveness (`/healthz`) is the event loop answering.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from batteryop.csr_approver.config import PROG, ApproverConfig, ConfigError, parse
from batteryop.csr_approver.controller import Approver
from batteryop.csr_approver.metrics import ApproverMetrics
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.obs.health import serving_probes
from batteryop.obs.process import run_deployable

log = logging.getLogger("batteryop.csr_approver")


async def run(config: ApproverConfig, stop: asyncio.Event) -> None:
    registry = CollectorRegistry()
    kube_config = (
        KubeConfig.from_kubeconfig(str(config.kubeconfig))
        if config.kubeconfig
        else KubeConfig.load()
    )
    async with KubeClient(kube_config, user_agent=PROG) as kube:
        approver = Approver(config, kube, metrics=ApproverMetrics(registry))
        async with serving_probes(
            health_bind_address=config.health_probe_bind_address,
            metrics_bind_address=config.metrics_bind_address,
            # DP-107: and one check per long-lived task, naming one that is down.
            checks={"approver": lambda: approver.ready, **approver.supervisor.checks()},
            registry=registry,
        ):
            log.info("Started", extra={"trust_domain": config.trust_domain})
            await approver.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    return run_deployable(
        PROG,
        argv,
        parse=parse,
        run=run,
        config_errors=(ConfigError, ValueError),
        # A bind address that does not parse is a ValueError: a flag's fault, exit 2.
        fatal={ValueError: 2},
        log=log,
    )


if __name__ == "__main__":
    sys.exit(main())
