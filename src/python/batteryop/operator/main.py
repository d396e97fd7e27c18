"""battery-operator's entry point: flags, logging, clients, probes, metrics, then run.

    battery-operator --battery-address=127.0.0.1:50051 --health-probe-bind-address=:8081
    battery-operator db backup|check|restore ...   (battery's database: batteryop.battery.database)

Exits 2 with one line naming the flag on a bad setting; 0 after SIGTERM or SIGINT once
every controller has stopped. Readiness (`/readyz`) is false while battery's Events stream
is down (DP-012) or a background task is down (named in the answer); liveness (`/healthz`)
is the event loop answering.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from batteryop.battery import BatteryClient, BatteryConfig, ReconnectPolicy, TLSConfig, database
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.obs.addresses import parse_bind_address
from batteryop.obs.health import HealthServer, MetricsServer
from batteryop.obs.metrics import BatteryCallMetrics, OperatorMetrics
from batteryop.obs.process import run_deployable
from batteryop.operator.app import Operator
from batteryop.operator.config import ConfigError, OperatorConfig, parse

log = logging.getLogger("batteryop.operator")


def battery_config(config: OperatorConfig) -> BatteryConfig:
    tls = None
    if config.battery_ca_file is not None:
        tls = TLSConfig(
            ca_file=config.battery_ca_file,
            cert_file=config.battery_cert_file,
            key_file=config.battery_key_file,
        )
    return BatteryConfig(
        target=config.battery_address,
        call_timeout=config.battery_call_timeout,
        claim_timeout=config.battery_claim_timeout,
        tls=tls,
        reconnect=ReconnectPolicy(
            initial=config.battery_reconnect_base, maximum=config.battery_reconnect_max
        ),
    )


async def run(config: OperatorConfig, stop: asyncio.Event) -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    kube_config = (
        KubeConfig.from_kubeconfig(str(config.kubeconfig))
        if config.kubeconfig
        else KubeConfig.load()
    )
    async with (
        KubeClient(kube_config) as kube,
        BatteryClient.connect(
            battery_config(config), observer=BatteryCallMetrics(metrics)
        ) as battery,
    ):
        operator = Operator(
            config, kube=kube, kube_config=kube_config, battery=battery, metrics=metrics
        )
        servers: list[HealthServer | MetricsServer] = []
        health_at = parse_bind_address(
            config.health_probe_bind_address, flag="--health-probe-bind-address"
        )
        if health_at is not None:
            servers.append(
                HealthServer(
                    *health_at,
                    # DP-012, and one check per background task: /readyz names one that is down.
                    checks={
                        "battery": lambda: operator.events_subscribed,
                        **operator.supervisor.checks(),
                    },
                    liveness_checks={"loop": lambda: True},
                )
            )
        metrics_at = parse_bind_address(config.metrics_bind_address, flag="--metrics-bind-address")
        if metrics_at is not None:
            servers.append(MetricsServer(*metrics_at, registry))
        for server in servers:
            await server.start()
        try:
            await operator.run(stop)
        finally:
            for server in servers:
                await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["db"]:  # DP-116: battery's database, from the operator's container
        return database.main(args[1:], prog="battery-operator db")
    return run_deployable(
        "battery-operator",
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
