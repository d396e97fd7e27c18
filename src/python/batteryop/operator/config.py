"""The operator's settings: one frozen value, parsed from flags (and their env twins) once.

Every setting has a flag; every flag has a default that works in the Deployment of the
Manifests. A bad value stops the process at start with one line naming the flag and the rule.

Requirements: DP-010 (loopback battery, a deadline on every call), DP-013 (the separate
ClaimVM deadline), CL-018 (concurrent reconciles of claims, at least two).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from batteryop.api import names
from batteryop.battery.config import is_loopback_host
from batteryop.obs.flags import FlagError, add_process_flags, boolean, duration, flag_adder

ConfigError = FlagError
"""A flag has a value the operator cannot run with (the one error every deployable's flags use)."""


def _seconds(flag: str, value: str) -> timedelta:
    return duration(flag, value, positive=True)


@dataclass(frozen=True)
class OperatorConfig:
    battery_address: str = "127.0.0.1:50051"
    battery_call_timeout: timedelta = timedelta(seconds=10)
    battery_claim_timeout: timedelta = timedelta(minutes=2)
    battery_ca_file: Path | None = None
    battery_cert_file: Path | None = None
    battery_key_file: Path | None = None
    battery_reconnect_base: timedelta = timedelta(seconds=1)
    battery_reconnect_max: timedelta = timedelta(seconds=30)
    # 16: a burst of 100 claims was bound by 4 workers (one kept for renewals, CL-018), not
    # by CPU; docs/dev/operator-performance.md, "Claim workers".
    claim_concurrent_reconciles: int = 16
    pool_concurrent_reconciles: int = 2
    pool_resync_interval: timedelta = timedelta(seconds=30)
    namespace: str = names.OPERATOR_NAMESPACE
    battery_config_map: str = names.BATTERY_CONFIG_MAP
    health_probe_bind_address: str = ":8081"
    metrics_bind_address: str = ":8080"
    kubeconfig: Path | None = None
    log_level: str = "info"
    log_format: str = "json"
    bind_events: bool = False

    def __post_init__(self) -> None:
        host = self.battery_address.rsplit(":", 1)[0].strip("[]")
        if not is_loopback_host(host):
            # DP-001, DP-010: battery is a sidecar on the loopback interface.
            raise ConfigError(
                "--battery-address", f"{self.battery_address!r} must be a loopback address"
            )
        if self.claim_concurrent_reconciles < 2:
            # CL-018: one slot stays free for renewals while ClaimVM calls are outstanding.
            raise ConfigError("--claim-concurrent-reconciles", "must be at least 2")
        if self.pool_concurrent_reconciles < 1:
            raise ConfigError("--pool-concurrent-reconciles", "must be at least 1")
        if (self.battery_cert_file is None) != (self.battery_key_file is None):
            raise ConfigError("--battery-cert-file", "and --battery-key-file go together")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError("--log-level", "must be debug, info, warning or error")
        if self.log_format not in ("json", "text"):
            raise ConfigError("--log-format", "must be json or text")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="battery-operator",
        description="Pool and MicroVMClaim controllers in front of battery (poolmgrd).",
        epilog="Every flag can also be set by the environment variable BATTERYOP_<FLAG>, "
        "e.g. BATTERYOP_BATTERY_ADDRESS.",
    )
    d = OperatorConfig()

    add = flag_adder(p, fallbacks={"--namespace": "POD_NAMESPACE"})
    add("--battery-address", d.battery_address, "battery's gRPC address; loopback only")
    add("--battery-call-timeout", "10s", "deadline of every battery call but ClaimVM")
    add("--battery-claim-timeout", "2m", "deadline of ClaimVM")
    add("--battery-ca-file", None, "CA bundle to verify battery's serving certificate (TLS)")
    add("--battery-cert-file", None, "client certificate for battery (mutual TLS)")
    add("--battery-key-file", None, "client key for battery (mutual TLS)")
    add("--battery-reconnect-base", "1s", "first wait before re-subscribing to battery's Events")
    add("--battery-reconnect-max", "30s", "longest wait before re-subscribing")
    add("--claim-concurrent-reconciles", d.claim_concurrent_reconciles, "claim workers (>= 2)")
    add("--pool-concurrent-reconciles", d.pool_concurrent_reconciles, "Pool workers")
    add("--pool-resync-interval", "30s", "refresh every Pool this often while Events are down")
    add("--namespace", d.namespace, "the operator's namespace")
    add("--battery-config-map", d.battery_config_map, "ConfigMap holding battery's config")
    add_process_flags(add, d)
    add(
        "--bind-events",
        "false",
        "also record a Normal Bound Event on each claim as it binds (one API request more per "
        "claim, a quarter of a bind's; the Bound condition records the bind either way)",
    )
    return p


def _int(flag: str, value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError(flag, f"{value!r} is not a whole number") from None


def _path(value: object) -> Path | None:
    return Path(str(value)) if value not in (None, "") else None


def parse(argv: Sequence[str] | None = None) -> OperatorConfig:
    """Flags (and environment) to a checked OperatorConfig; ConfigError on a bad value."""
    a = parser().parse_args(argv)
    return OperatorConfig(
        battery_address=str(a.battery_address),
        battery_call_timeout=_seconds("--battery-call-timeout", str(a.battery_call_timeout)),
        battery_claim_timeout=_seconds("--battery-claim-timeout", str(a.battery_claim_timeout)),
        battery_ca_file=_path(a.battery_ca_file),
        battery_cert_file=_path(a.battery_cert_file),
        battery_key_file=_path(a.battery_key_file),
        battery_reconnect_base=_seconds("--battery-reconnect-base", str(a.battery_reconnect_base)),
        battery_reconnect_max=_seconds("--battery-reconnect-max", str(a.battery_reconnect_max)),
        claim_concurrent_reconciles=_int(
            "--claim-concurrent-reconciles", a.claim_concurrent_reconciles
        ),
        pool_concurrent_reconciles=_int(
            "--pool-concurrent-reconciles", a.pool_concurrent_reconciles
        ),
        pool_resync_interval=_seconds("--pool-resync-interval", str(a.pool_resync_interval)),
        namespace=str(a.namespace),
        battery_config_map=str(a.battery_config_map),
        health_probe_bind_address=str(a.health_probe_bind_address),
        metrics_bind_address=str(a.metrics_bind_address),
        kubeconfig=_path(a.kubeconfig),
        log_level=str(a.log_level).lower(),
        log_format=str(a.log_format),
        bind_events=boolean("--bind-events", a.bind_events),
    )
