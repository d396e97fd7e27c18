"""The host registry's settings: one frozen value, parsed from flags (and their env twins) once.

Defaults fit the Manifests (the operator Pod's `host-registry` container). A bad value stops
the process at start with one line naming the flag and the rule (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.api import names
from batteryop.battery import configfile
from batteryop.battery.config import is_loopback_host
from batteryop.obs.flags import FlagError, add_process_flags, duration, flag_adder

PROG: Final = "host-registry"

DEFAULT_CONFIG_FILE: Final = "/etc/battery/config/config.json"
DEFAULT_PROCESS_NAME: Final = "poolmgrd"

ConfigError = FlagError
"""A flag has a value the registry cannot run with; `flag` names it."""


def seconds(flag: str, value: str) -> float:
    """`30s`, `1m`, `500ms`, `0` or a number of seconds; not negative."""
    return duration(flag, value).total_seconds()


@dataclass(frozen=True)
class RegistryConfig:
    namespace: str = names.OPERATOR_NAMESPACE
    battery_address: str = configfile.DEFAULT_API_ADDRESS
    battery_metrics_address: str = configfile.DEFAULT_METRICS_ADDRESS
    battery_config_map: str = names.BATTERY_CONFIG_MAP
    battery_config_file: Path = Path(DEFAULT_CONFIG_FILE)
    """Where this container mounts battery's config: the restart waits until it shows what
    was written (DP-006), and battery's process is the one whose command line names it."""
    battery_tls_dir: Path = Path(configfile.DEFAULT_TLS_DIR)
    """battery's client certificate, key and serving CA, as battery's container mounts them
    (named in battery's config) and as this container mounts them (DP-007: a renewed
    certificate is seen here)."""
    battery_process_name: str = DEFAULT_PROCESS_NAME
    settle_time: float = 30.0  # IN-011
    restart_window: float = 60.0  # IN-012
    drain_timeout: float = 30.0  # IN-013
    restart_timeout: float = 120.0  # DP-006: signal to answering
    host_resync_interval: float = 30.0
    """IN-105: how often battery's Host list is read again (`ListHosts`) besides each time
    the connection to battery is made again."""
    call_timeout: float = 10.0
    health_probe_bind_address: str = ":8082"
    metrics_bind_address: str = ":8083"
    kubeconfig: Path | None = None
    log_level: str = "info"
    log_format: str = "json"

    def __post_init__(self) -> None:
        for flag, text in (
            ("--namespace", self.namespace),
            ("--battery-config-map", self.battery_config_map),
            ("--battery-process-name", self.battery_process_name),
            ("--battery-config-file", str(self.battery_config_file)),
            ("--battery-tls-dir", str(self.battery_tls_dir)),
        ):
            if not text:
                raise ConfigError(flag, "must not be empty")
        if not self.battery_config_file.is_absolute():
            raise ConfigError("--battery-config-file", "must be an absolute path")
        if not self.battery_tls_dir.is_absolute():
            raise ConfigError("--battery-tls-dir", "must be an absolute path")
        host, sep, port = self.battery_address.rpartition(":")
        if not sep or not port.isdigit() or not is_loopback_host(host.strip("[]")):
            raise ConfigError("--battery-address", "must be a loopback host:port (DP-001)")
        for flag, value in (
            ("--settle-time", self.settle_time),
            ("--restart-window", self.restart_window),
            ("--drain-timeout", self.drain_timeout),
        ):
            if value < 0:
                raise ConfigError(flag, "must not be negative")
        for flag, value in (
            ("--restart-timeout", self.restart_timeout),
            ("--battery-call-timeout", self.call_timeout),
            ("--host-resync-interval", self.host_resync_interval),
        ):
            if value <= 0:
                raise ConfigError(flag, "must be greater than zero")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError("--log-level", "must be debug, info, warning or error")
        if self.log_format not in ("json", "text"):
            raise ConfigError("--log-format", "must be json or text")

    @property
    def client_certificate(self) -> Path:
        return self.battery_tls_dir / configfile.TLS_CERT_FILE


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Admits Nodes as battery's Hosts, writes battery's config, restarts or "
        "updates battery, and publishes the Host set the Pool controller places Pools on.",
        epilog="Every flag can also be set by the environment variable BATTERYOP_<FLAG>, "
        "e.g. BATTERYOP_SETTLE_TIME.",
    )
    d = RegistryConfig()

    add = flag_adder(p, fallbacks={"--namespace": "POD_NAMESPACE"})
    add("--namespace", d.namespace, "the operator namespace")
    add("--battery-address", d.battery_address, "battery's loopback gRPC address")
    add("--battery-metrics-address", d.battery_metrics_address, "battery's metrics address")
    add("--battery-config-map", d.battery_config_map, "the ConfigMap of battery's config")
    add("--battery-config-file", str(d.battery_config_file), "its mount in this container")
    add("--battery-tls-dir", str(d.battery_tls_dir), "battery's TLS files (both mounts)")
    add("--battery-process-name", d.battery_process_name, "battery's process name")
    add("--settle-time", "30s", "a Host change must hold this long (IN-011)")
    add("--restart-window", "1m", "changes in one window make one restart (IN-012)")
    add("--drain-timeout", "30s", "longest wait for Pools to leave a Host (IN-013)")
    add("--restart-timeout", "2m", "longest wait from signal to battery answering")
    add("--battery-call-timeout", "10s", "deadline of each battery call")
    add(
        "--host-resync-interval",
        "30s",
        "read battery's Host list this often, and on each reconnect (IN-105)",
    )
    add_process_flags(add, d)
    return p


def parse(argv: Sequence[str] | None = None) -> RegistryConfig:
    """Flags (and environment) to a checked RegistryConfig; ConfigError on a bad value."""
    a = parser().parse_args(argv)
    return RegistryConfig(
        namespace=str(a.namespace),
        battery_address=str(a.battery_address),
        battery_metrics_address=str(a.battery_metrics_address),
        battery_config_map=str(a.battery_config_map),
        battery_config_file=Path(str(a.battery_config_file)),
        battery_tls_dir=Path(str(a.battery_tls_dir)),
        battery_process_name=str(a.battery_process_name),
        settle_time=seconds("--settle-time", str(a.settle_time)),
        restart_window=seconds("--restart-window", str(a.restart_window)),
        drain_timeout=seconds("--drain-timeout", str(a.drain_timeout)),
        restart_timeout=seconds("--restart-timeout", str(a.restart_timeout)),
        call_timeout=seconds("--battery-call-timeout", str(a.battery_call_timeout)),
        host_resync_interval=seconds("--host-resync-interval", str(a.host_resync_interval)),
        health_probe_bind_address=str(a.health_probe_bind_address),
        metrics_bind_address=str(a.metrics_bind_address),
        kubeconfig=Path(str(a.kubeconfig)) if a.kubeconfig else None,
        log_level=str(a.log_level).lower(),
        log_format=str(a.log_format),
    )
