"""The host registry's entry point: flags, logging, the kube and battery clients, probes,
metrics, then run until SIGTERM.

    host-registry --battery-address=127.0.0.1:50051 \\
        --battery-config-file=/etc/battery/config/config.json --battery-tls-dir=/etc/battery/tls

Exits 2 with one line naming the flag on a bad setting; 0 after SIGTERM or SIGINT. Readiness
(`/readyz`) is true once it has read what battery has and resumed, and while each of its
long-lived tasks runs (`loops.TASKS`, DP-107: a failed one is named until it runs again);
liveness (`/healthz`) is the event loop answering.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence
from datetime import timedelta

import grpc
from prometheus_client import CollectorRegistry

from batteryop.battery.client import BatteryClient, channel_options
from batteryop.battery.config import BatteryConfig, ReconnectPolicy
from batteryop.host_registry.config import PROG, ConfigError, RegistryConfig, parse
from batteryop.host_registry.controller import Registry
from batteryop.host_registry.filewatch import WatchError
from batteryop.host_registry.metrics import RegistryMetrics
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.events import EventRecorder
from batteryop.obs.health import serving_probes
from batteryop.obs.process import run_deployable

log = logging.getLogger("batteryop.host_registry")

EVENT_CONTROLLER = "battery.liquidmetal-x.dev/host-registry"


def battery_client(config: RegistryConfig) -> BatteryClient:
    """A plaintext loopback client that reconnects within a tenth of a second after battery
    restarts (gRPC's own minimum is seconds)."""
    battery_config = BatteryConfig(
        target=config.battery_address,
        call_timeout=timedelta(seconds=config.call_timeout),
        reconnect=ReconnectPolicy(
            initial=timedelta(milliseconds=100), maximum=timedelta(seconds=1), jitter=0.1
        ),
        keepalive_time=None,
    )
    options = [*channel_options(battery_config), ("grpc.min_reconnect_backoff_ms", 100)]
    channel = grpc.aio.insecure_channel(battery_config.target, options=options)
    return BatteryClient(battery_config, channel)


async def run(config: RegistryConfig, stop: asyncio.Event) -> None:
    metrics_registry = CollectorRegistry()
    kube_config = (
        KubeConfig.from_kubeconfig(str(config.kubeconfig))
        if config.kubeconfig
        else KubeConfig.load()
    )
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    async with KubeClient(kube_config, user_agent=PROG) as kube:
        battery = battery_client(config)
        registry = Registry(
            config,
            kube,
            battery,
            events=EventRecorder(kube, controller=EVENT_CONTROLLER, instance=instance),
            metrics=RegistryMetrics(metrics_registry),
        )
        log.info(
            "Started",
            extra={
                "battery": config.battery_address,
                "config_file": str(config.battery_config_file),
                "settle_time": config.settle_time,
                "restart_window": config.restart_window,
            },
        )
        try:
            async with serving_probes(
                health_bind_address=config.health_probe_bind_address,
                metrics_bind_address=config.metrics_bind_address,
                checks={"registry": lambda: registry.ready, **registry.supervisor.checks()},
                registry=metrics_registry,
            ):
                await registry.run(stop)
        finally:
            await battery.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    return run_deployable(
        PROG,
        argv,
        parse=parse,
        run=run,
        config_errors=(ConfigError, ValueError),
        fatal={WatchError: 1, ValueError: 2},
        log=log,
    )


if __name__ == "__main__":
    sys.exit(main())
