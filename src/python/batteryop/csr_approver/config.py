"""The CSR approver's settings: one frozen value, parsed from flags (and their env twins) once.

Every flag but `--trust-domain` has a default that fits the Manifests' names. Without a trust
domain the approver refuses to start (CT-020): it could not tell which SPIFFE IDs to allow. A bad
value stops the process at start with one line naming the flag and the rule (exit 2).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final

from batteryop.api import names
from batteryop.csr_approver.checks import service_account_username
from batteryop.obs.flags import FlagError, add_process_flags, flag_adder
from batteryop.obs.flags import duration as flag_duration

PROG: Final = "csr-approver"

_TRUST_DOMAIN = re.compile(names.TRUST_DOMAIN_PATTERN)
ConfigError = FlagError
"""A flag has a value the approver cannot run with; `flag` names it."""


def duration(flag: str, value: str) -> timedelta:
    """`168h`, `30m`, `90s`, `500ms` or a number of seconds; greater than zero."""
    return flag_duration(flag, value, positive=True)


@dataclass(frozen=True)
class ApproverConfig:
    trust_domain: str
    certificate_max_duration: timedelta = timedelta(hours=168)
    namespace: str = names.OPERATOR_NAMESPACE
    serving_ca_secret: str = names.SERVING_CA_SECRET
    client_ca_secret: str = names.CLIENT_CA_SECRET
    exec_agent_serving_ca_secret: str = names.EXEC_AGENT_SERVING_CA_SECRET
    ca_bundle_config_map: str = names.CA_BUNDLE_CONFIG_MAP
    address_pins_config_map: str = names.ADDRESS_PINS_CONFIG_MAP
    exec_agent_service_account: str = names.EXEC_AGENT_NAME
    exec_agent_namespace: str = ""
    """The Exec Agent ServiceAccount's namespace; empty: the approver's own `namespace`."""
    workers: int = 8
    """Requests reviewed at once. A review mostly waits on the API server: on the benchmark's
    loaded two-core machine 8 workers signed a burst of client requests about three times as
    fast as 4 (tests/bench/csr_approver_bench.py)."""
    health_probe_bind_address: str = ":8081"
    metrics_bind_address: str = ":8080"
    kubeconfig: Path | None = None
    log_level: str = "info"
    log_format: str = "json"

    def __post_init__(self) -> None:
        if not self.trust_domain:
            # CT-020: no trust domain, no start.
            raise ConfigError("--trust-domain", "is required (e.g. battery.liquidmetal-x.dev)")
        if not _TRUST_DOMAIN.fullmatch(self.trust_domain):
            raise ConfigError(
                "--trust-domain",
                f"{self.trust_domain!r}: lowercase letters, digits, '.', '-', '_'; at most 255",
            )
        if self.certificate_max_duration <= timedelta(0):
            raise ConfigError("--certificate-max-duration", "must be greater than zero")
        for flag, value in (
            ("--namespace", self.namespace),
            ("--serving-ca-secret", self.serving_ca_secret),
            ("--client-ca-secret", self.client_ca_secret),
            ("--exec-agent-serving-ca-secret", self.exec_agent_serving_ca_secret),
            ("--ca-bundle-config-map", self.ca_bundle_config_map),
            ("--address-pins-config-map", self.address_pins_config_map),
            ("--exec-agent-service-account", self.exec_agent_service_account),
        ):
            if not value:
                raise ConfigError(flag, "must not be empty")
        if self.workers < 1:
            raise ConfigError("--workers", "must be at least 1")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError("--log-level", "must be debug, info, warning or error")
        if self.log_format not in ("json", "text"):
            raise ConfigError("--log-format", "must be json or text")

    @property
    def exec_agent_username(self) -> str:
        """The user name of the Exec Agent ServiceAccount's tokens."""
        ns = self.exec_agent_namespace or self.namespace
        return service_account_username(ns, self.exec_agent_service_account)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Approves and signs the Exec Agents' certificate requests for battery's "
        "three signers, and publishes the CA certificates.",
        epilog="Every flag can also be set by the environment variable BATTERYOP_<FLAG>, "
        "e.g. BATTERYOP_TRUST_DOMAIN.",
    )

    add = flag_adder(p, fallbacks={"--namespace": "POD_NAMESPACE"})
    d = ApproverConfig(trust_domain=names.DEFAULT_TRUST_DOMAIN)
    add("--trust-domain", "", "SPIFFE trust domain of every certificate (required)")
    add("--certificate-max-duration", "168h", "longest lifetime of a certificate")
    add("--namespace", d.namespace, "the approver's namespace")
    add("--serving-ca-secret", d.serving_ca_secret, "Secret of the serving CA")
    add("--client-ca-secret", d.client_ca_secret, "Secret of the client CA")
    add(
        "--exec-agent-serving-ca-secret",
        d.exec_agent_serving_ca_secret,
        "Secret of the Exec Agents' serving CA",
    )
    add("--ca-bundle-config-map", d.ca_bundle_config_map, "ConfigMap the CA certs go to")
    add("--address-pins-config-map", d.address_pins_config_map, "ConfigMap of address pins")
    add("--exec-agent-service-account", d.exec_agent_service_account, "the only requester")
    add("--exec-agent-namespace", "", "its namespace; default: --namespace")
    add("--workers", d.workers, "requests reviewed at once")
    add_process_flags(add, d)
    return p


def parse(argv: Sequence[str] | None = None) -> ApproverConfig:
    """Flags (and environment) to a checked ApproverConfig; ConfigError on a bad value."""
    a = parser().parse_args(argv)
    try:
        workers = int(str(a.workers))
    except ValueError:
        raise ConfigError("--workers", f"{a.workers!r} is not a whole number") from None
    return ApproverConfig(
        trust_domain=str(a.trust_domain),
        certificate_max_duration=duration(
            "--certificate-max-duration", str(a.certificate_max_duration)
        ),
        namespace=str(a.namespace),
        serving_ca_secret=str(a.serving_ca_secret),
        client_ca_secret=str(a.client_ca_secret),
        exec_agent_serving_ca_secret=str(a.exec_agent_serving_ca_secret),
        ca_bundle_config_map=str(a.ca_bundle_config_map),
        address_pins_config_map=str(a.address_pins_config_map),
        exec_agent_service_account=str(a.exec_agent_service_account),
        exec_agent_namespace=str(a.exec_agent_namespace),
        workers=workers,
        health_probe_bind_address=str(a.health_probe_bind_address),
        metrics_bind_address=str(a.metrics_bind_address),
        kubeconfig=Path(str(a.kubeconfig)) if a.kubeconfig else None,
        log_level=str(a.log_level).lower(),
        log_format=str(a.log_format),
    )
