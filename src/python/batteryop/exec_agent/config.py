"""The Exec Agent's settings: one frozen value, parsed from flags (and environment) once.

Every flag has an environment twin, `BATTERYOP_<FLAG>` (`--call-timeout` is
`BATTERYOP_CALL_TIMEOUT`); the Node name and the Host address also fall back on `NODE_NAME` and
`HOST_IP`, which the DaemonSet sets from the downward API. A bad value stops the agent at start
with every problem listed, one line each, naming the flag.

`parse()` also checks the one thing that needs the machine: the flintlockd endpoint and the
serving address are addresses of this Host (EA-001, EA-002). An address is this Host's when a
socket can be bound to it; every loopback address is, which is what tests use.

Requirements: EA-001 (only this Host's flintlockd, over TLS with a client certificate), EA-002
(serve over TLS on the Host's internal address), EA-010 (the token audience), EA-014 (a deadline
on every API call), EA-021 (the deadline for flintlockd to accept a stream), EA-033 and EA-036
(the not-ready directory is configured), EA-040 and EA-041 (the drain guard's namespace, image and
timeout), EA-105 (the limits on streams, failed authentications and relay buffers), EA-111 (only
the guard image the admission policy admits), EA-116 (the streams' worst-case memory fits the
budget), EA-120 and EA-123 (calls per identity, streams per Holder).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from batteryop.api import names
from batteryop.api.times import parse_duration
from batteryop.exec_agent.host_checks import HostPaths
from batteryop.exec_agent.memory import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_STREAMS,
    DEFAULT_RELAY_BUFFER_BYTES,
    MIN_MESSAGE_BYTES,
    STREAM_MEMORY_BYTES,
    stream_bytes,
    streams_that_fit,
)
from batteryop.obs.flags import flag_adder

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "MIN_MESSAGE_BYTES", "AgentConfig", "AgentConfigError"]


class AgentConfigError(ValueError):
    """One or more flags have values the agent cannot run with; `problems` lists them."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)

    def __str__(self) -> str:
        return "\n".join(self.problems)


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent runs with. Build it with `parse()`, or directly in tests.

    - `node_name`: this Host's Node; a claim must name it (EA-013).
    - `address` and `port`: where the exec API listens (EA-002); port 0 picks a free port.
    - `flintlockd`: `ip:port` of this Host's flintlockd (EA-001).
    - `trust_domain`: when set, every certificate and key comes by CSR (`certs`, EA-060..EA-068)
      and the five file settings below must be empty; `namespace` holds the CA bundle
      ConfigMap `ca_bundle_config_map`, `flintlockd_cert_dir` receives flintlockd's files, and
      `certificate_duration` (at least 10 minutes; None: the signer's default) is asked for.
    - `tls_cert_file`, `tls_key_file`: the exec API's serving certificate and key (without
      `trust_domain`: for tests and for clusters that hand certificates out themselves).
    - `flintlockd_ca_file`: the CA that signed flintlockd's serving certificate.
    - `flintlockd_cert_file`, `flintlockd_key_file`: the agent's flintlockd client certificate.
    - `token_audience`: the audience every caller's token must carry (EA-010).
    - `call_timeout`: the deadline of each API server request (TokenReview, claim read) and of
      unary calls to flintlockd.
    - `exec_open_timeout`: how long a caller has to send its start message, and flintlockd to
      answer for the MicroVM and accept the stream (EA-021).
    - `max_message_bytes`: the largest gRPC message taken from a caller (and sent on).
    - `max_streams`, `max_streams_per_claim`, `max_streams_per_holder`: exec streams running at
      once on the agent, for one claim (EA-105), and for one Holder across its claims (EA-123).
    - `relay_buffer_bytes`: output read from flintlockd but not yet sent, per stream, at most
      (plus one message): a stream's memory is bounded by it and `max_message_bytes`.
    - `stream_memory_bytes`: what all streams may hold at worst; `max_streams` times one
      stream's worst case (`memory.stream_bytes`) must fit in it (EA-116).
    - `failed_auth_burst`, `failed_auth_rate`: each caller address's bucket of failed
      authentications, and how many come back per second (EA-105, `limits`).
    - `identity_call_burst`, `identity_call_rate`: each reviewed identity's bucket of calls,
      refused ones included, and how many come back per second (EA-120, `limits`).
    - `host_paths`: where the Host checks look (EA-031..EA-033).
    - `sync_interval`: how often the Host is checked; `report_resync`: how often the Node report
      is written even when it did not change (EA-034).
    - `guard_namespace`, `guard_image`, `drain_timeout`: where the drain guard lives, what its
      Pod runs, and how long a drain of the Node is held open at most (EA-040, EA-041). The
      image can only be `names.DRAIN_GUARD_IMAGE`, the one the admission policy admits (EA-110).
    - `drain_guard_linger`: how long the guard stays after the last Bound claim went while the
      Node is not cordoned (EA-042); zero removes it at once.
    """

    node_name: str
    address: str
    flintlockd: str
    tls_cert_file: Path = Path()
    tls_key_file: Path = Path()
    flintlockd_ca_file: Path = Path()
    flintlockd_cert_file: Path = Path()
    flintlockd_key_file: Path = Path()
    trust_domain: str = ""
    namespace: str = names.OPERATOR_NAMESPACE
    flintlockd_cert_dir: Path = Path(names.FLINTLOCKD_CERT_DIR)
    ca_bundle_config_map: str = names.CA_BUNDLE_CONFIG_MAP
    certificate_duration: timedelta | None = None
    port: int = names.EXEC_AGENT_PORT
    token_audience: str = names.EXEC_AGENT_AUDIENCE
    call_timeout: timedelta = timedelta(seconds=10)
    exec_open_timeout: timedelta = timedelta(seconds=10)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_claim: int = 16
    max_streams_per_holder: int = 64
    relay_buffer_bytes: int = DEFAULT_RELAY_BUFFER_BYTES
    stream_memory_bytes: int = STREAM_MEMORY_BYTES
    failed_auth_burst: int = 32
    failed_auth_rate: float = 2.0
    identity_call_burst: int = 200
    identity_call_rate: float = 100.0
    kubeconfig: Path | None = None
    health_probe_bind_address: str = "0"
    log_level: str = "info"
    log_format: str = "json"
    shutdown_grace: timedelta = field(default=timedelta(seconds=5))
    host_paths: HostPaths = field(default_factory=HostPaths)
    sync_interval: timedelta = timedelta(seconds=2)
    report_resync: timedelta = timedelta(minutes=5)
    guard_namespace: str = names.OPERATOR_NAMESPACE
    guard_image: str = names.DRAIN_GUARD_IMAGE
    drain_timeout: timedelta = timedelta(seconds=names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS)
    drain_guard_linger: timedelta = timedelta(seconds=names.EXEC_AGENT_DRAIN_GUARD_LINGER_SECONDS)

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise AgentConfigError(problems)

    def problems(self) -> list[str]:
        """Every rule the values break, sorted; [] when the config is usable."""
        found: list[str] = []
        if not self.node_name or not _is_dns_subdomain(self.node_name):
            found.append(f"--host-node: {self.node_name!r} is not a Node name")
        elif not _is_dns_subdomain(names.drain_guard_name(self.node_name)):
            found.append(
                f"--host-node: {self.node_name!r} is too long to name its drain guard "
                f"({names.DRAIN_GUARD_PREFIX}<node>, at most 253 characters)"
            )
        if not self.guard_namespace or not _is_dns_label(self.guard_namespace):
            found.append(f"--guard-namespace: {self.guard_namespace!r} is not a namespace name")
        if self.guard_image != names.DRAIN_GUARD_IMAGE:  # EA-111: the one image EA-110 admits
            found.append(
                f"--guard-image: {self.guard_image!r} is not {names.DRAIN_GUARD_IMAGE}, the one "
                "image the admission policy admits for the drain guard (a mirror must serve it "
                "under that name)"
            )
        if not _is_ip(self.address):
            found.append(f"--address: {self.address!r} is not an IP address")
        if not 0 <= self.port <= 65535:
            found.append(f"--port: {self.port} is not a port")
        try:
            host, _ = split_endpoint(self.flintlockd)
        except ValueError as e:
            found.append(f"--flintlockd: {e}")
        else:
            if not _is_ip(host):
                # EA-001: a name could resolve anywhere; only an address can be checked.
                found.append(f"--flintlockd: {self.flintlockd!r} must name an IP address")
        for flag, path in (
            ("--tls-cert-file", self.tls_cert_file),
            ("--tls-key-file", self.tls_key_file),
            ("--flintlockd-ca-file", self.flintlockd_ca_file),
            ("--flintlockd-cert-file", self.flintlockd_cert_file),
            ("--flintlockd-key-file", self.flintlockd_key_file),
        ):
            given = bool(str(path)) and str(path) != "."
            if self.trust_domain and given:
                found.append(f"{flag}: not used with --trust-domain (certificates come by CSR)")
            elif not self.trust_domain and not given:
                found.append(f"{flag}: is required (or --trust-domain, for certificates by CSR)")
        if self.trust_domain:
            if not re.fullmatch(names.TRUST_DOMAIN_PATTERN, self.trust_domain):
                found.append(
                    f"--trust-domain: {self.trust_domain!r}: lowercase letters, digits, "
                    "'.', '-', '_'; at most 255"
                )
            if not self.namespace or not _is_dns_subdomain(self.namespace):
                found.append(f"--namespace: {self.namespace!r} is not a namespace name")
            if not self.ca_bundle_config_map or not _is_dns_subdomain(self.ca_bundle_config_map):
                found.append(f"--ca-bundle-config-map: {self.ca_bundle_config_map!r} is not a name")
            if not self.flintlockd_cert_dir.is_absolute():
                found.append("--flintlockd-cert-dir: must be an absolute path")
        if self.certificate_duration is not None and self.certificate_duration < timedelta(
            minutes=10
        ):
            found.append("--certificate-duration: must be at least 10m (the API's minimum)")
        if not self.token_audience.strip():
            found.append("--token-audience: must not be empty")
        for flag, value in (
            ("--call-timeout", self.call_timeout),
            ("--exec-open-timeout", self.exec_open_timeout),
            ("--sync-interval", self.sync_interval),
            ("--report-resync", self.report_resync),
            ("--drain-timeout", self.drain_timeout),
        ):
            if value <= timedelta(0):
                found.append(f"{flag}: must be greater than zero")
        if self.shutdown_grace < timedelta(0):
            found.append("--shutdown-grace: must not be negative")
        if self.drain_guard_linger < timedelta(0):
            found.append("--drain-guard-linger: must not be negative")
        if self.max_message_bytes < MIN_MESSAGE_BYTES:
            found.append(f"--max-message-bytes: must be at least {MIN_MESSAGE_BYTES}")
        for flag, count in (
            ("--max-streams", self.max_streams),
            ("--max-streams-per-claim", self.max_streams_per_claim),
            ("--max-streams-per-holder", self.max_streams_per_holder),
            ("--failed-auth-burst", self.failed_auth_burst),
            ("--identity-call-burst", self.identity_call_burst),
        ):
            if count < 1:
                found.append(f"{flag}: must be at least 1")
        if self.relay_buffer_bytes < MIN_MESSAGE_BYTES:
            found.append(f"--relay-buffer-bytes: must be at least {MIN_MESSAGE_BYTES}")
        sizes = {
            "max_message_bytes": self.max_message_bytes,
            "relay_buffer_bytes": self.relay_buffer_bytes,
        }
        fit = streams_that_fit(self.stream_memory_bytes, **sizes)
        if self.max_streams > fit:  # EA-116
            found.append(
                f"--max-streams: {self.max_streams} streams of up to {stream_bytes(**sizes)} "
                f"bytes each (by --max-message-bytes and --relay-buffer-bytes) need more than "
                f"--stream-memory-bytes {self.stream_memory_bytes}; at most {fit} fit"
            )
        for flag, rate in (
            ("--failed-auth-rate", self.failed_auth_rate),
            ("--identity-call-rate", self.identity_call_rate),
        ):
            if not 0 < rate < float("inf"):
                found.append(f"{flag}: must be greater than zero")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            found.append("--log-level: must be debug, info, warning or error")
        if self.log_format not in ("json", "text"):
            found.append("--log-format: must be json or text")
        return sorted(found)

    @property
    def agent_address(self) -> str:
        """Where Holders reach this agent, as the Node report publishes it (EA-034)."""
        return join_endpoint(self.address, self.port)

    @property
    def listen_target(self) -> str:
        """`address:port` for the gRPC server (IPv6 in brackets)."""
        return join_endpoint(self.address, self.port)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of `host:port` or `[v6]:port`; ValueError naming what is wrong."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{endpoint!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{endpoint!r}: write an IPv6 address as [addr]:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{endpoint!r} has no valid port")
    return host, int(port)


def join_endpoint(host: str, port: int) -> str:
    """`host:port`, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _is_dns_subdomain(value: str) -> bool:
    if len(value) > 253:
        return False
    labels = value.split(".")
    return all(
        label
        and len(label) <= 63
        and label[0].isalnum()
        and label[-1].isalnum()
        and all(c.isalnum() or c == "-" for c in label)
        and label == label.lower()
        for label in labels
    )


def _is_dns_label(value: str) -> bool:
    return len(value) <= 63 and "." not in value and _is_dns_subdomain(value)


def is_address_of_this_host(address: str) -> bool:
    """Whether `address` (an IP) is assigned to this machine: a socket can be bound to it.

    Every 127.0.0.0/8 address and ::1 are (loopback). Binding does not listen, and port 0
    never clashes with a socket already bound.
    """
    ip = ipaddress.ip_address(address)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError as e:
            if e.errno in (errno.EADDRNOTAVAIL, errno.EINVAL, errno.EAFNOSUPPORT):
                return False
            raise
    return True


def check_host_addresses(config: AgentConfig) -> None:
    """EA-001, EA-002: refuse a flintlockd endpoint or a serving address not of this Host."""
    problems = []
    host, _ = split_endpoint(config.flintlockd)
    if not is_address_of_this_host(host):
        problems.append(f"--flintlockd: {config.flintlockd!r} is not an address of this Host")
    if not is_address_of_this_host(config.address):
        problems.append(f"--address: {config.address!r} is not an address of this Host")
    if problems:
        raise AgentConfigError(sorted(problems))


# --- flags -----------------------------------------------------------------------------------

_FALLBACK_ENV: Mapping[str, str] = {
    "--host-node": "NODE_NAME",
    "--address": "HOST_IP",
    "--namespace": "POD_NAMESPACE",
    "--guard-namespace": "POD_NAMESPACE",
}


def parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="exec-agent",
        description="Runs claimed MicroVMs' commands on this Host, for their Holders only.",
        epilog="Every flag can also be set by BATTERYOP_<FLAG>, e.g. BATTERYOP_CALL_TIMEOUT; "
        "--host-node, --address, --namespace and --guard-namespace fall back on NODE_NAME, "
        "HOST_IP and POD_NAMESPACE.",
    )

    add = flag_adder(p, environ=environ, fallbacks=_FALLBACK_ENV)

    add("--host-node", "", "this Host's Node name")
    add("--address", "", "this Host's internal IP address, where the exec API listens")
    add("--port", names.EXEC_AGENT_PORT, "port of the exec API")
    add(
        "--flintlockd",
        "",
        f"this Host's flintlockd, ip:port (default <address>:{names.FLINTLOCKD_PORT})",
    )
    add("--trust-domain", "", "SPIFFE trust domain; when set, certificates come by CSR")
    add("--namespace", names.OPERATOR_NAMESPACE, "namespace of the CA bundle ConfigMap")
    add("--ca-bundle-config-map", names.CA_BUNDLE_CONFIG_MAP, "ConfigMap with the CAs")
    add("--flintlockd-cert-dir", names.FLINTLOCKD_CERT_DIR, "where flintlockd's files go")
    add("--certificate-duration", "", "lifetime to ask for (>= 10m); default: the signer's")
    add("--tls-cert-file", "", "the exec API's serving certificate (PEM)")
    add("--tls-key-file", "", "the exec API's serving key (PEM)")
    add("--flintlockd-ca-file", "", "CA bundle verifying flintlockd's serving certificate")
    add("--flintlockd-cert-file", "", "client certificate for flintlockd")
    add("--flintlockd-key-file", "", "client key for flintlockd")
    add("--token-audience", names.EXEC_AGENT_AUDIENCE, "audience callers' tokens must carry")
    add("--call-timeout", "10s", "deadline of each API server request and flintlockd call")
    add("--exec-open-timeout", "10s", "deadline for the start message and flintlockd to accept")
    add("--max-message-bytes", DEFAULT_MAX_MESSAGE_BYTES, "largest gRPC message accepted")
    add("--max-streams", DEFAULT_MAX_STREAMS, "exec streams running at once on this agent")
    add("--max-streams-per-claim", 16, "exec streams running at once for one claim")
    add("--max-streams-per-holder", 64, "exec streams running at once for one Holder, all claims")
    add(
        "--relay-buffer-bytes",
        DEFAULT_RELAY_BUFFER_BYTES,
        "output waiting for a slow caller, per stream",
    )
    add(
        "--stream-memory-bytes",
        STREAM_MEMORY_BYTES,
        "memory all exec streams may hold at worst (--max-streams must fit in it)",
    )
    add("--failed-auth-burst", 32, "failed authentications an address may make at once")
    add("--failed-auth-rate", 2.0, "failed authentications per second an address gets back")
    add("--identity-call-burst", 200, "calls one reviewed identity may make at once")
    add("--identity-call-rate", 100.0, "calls per second one reviewed identity gets back")
    add("--kubeconfig", "", "kubeconfig file; default: in-cluster, else $KUBECONFIG")
    add("--health-probe-bind-address", "0", "/healthz and /readyz; 0 = off")
    add("--shutdown-grace", "5s", "how long running execs may finish at shutdown")
    d = HostPaths()
    add("--not-ready-dir", d.not_ready_dir, "files here name reasons the Host is not ready")
    add("--kvm-device", d.kvm_device, "KVM's device node (a character device)")
    add("--kvm-sysfs-dir", d.kvm_sysfs_dir, "KVM's sysfs directory")
    add("--thin-pool", d.thin_pool, "containerd's thin pool device name; empty: not checked")
    add("--sys-block-dir", d.sys_block_dir, "where device-mapper devices are listed")
    add("--sync-interval", "2s", "how often the Host is checked")
    add("--report-resync", "5m", "how often the Node report is rewritten unchanged")
    add("--guard-namespace", names.OPERATOR_NAMESPACE, "namespace of the drain guard")
    add("--guard-image", names.DRAIN_GUARD_IMAGE, "image of the drain guard Pod")
    add("--drain-timeout", "1h", "longest time a drain of the Node is held open for claims")
    add(
        "--drain-guard-linger",
        f"{names.EXEC_AGENT_DRAIN_GUARD_LINGER_SECONDS}s",
        "how long the drain guard stays after the last claim, while the Node is not cordoned",
    )
    add("--log-level", "info", "debug, info, warning or error")
    add("--log-format", "json", "json or text")
    return p


def parse(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    check_host: bool = True,
) -> AgentConfig:
    """Flags and environment to a checked AgentConfig; AgentConfigError listing every problem.

    With `check_host`, also refuse addresses that are not this Host's (EA-001, EA-002).
    """
    a = parser(environ).parse_args(argv)
    problems: list[str] = []

    def duration(flag: str, value: object) -> timedelta:
        try:
            return parse_duration(str(value).strip())
        except ValueError:
            problems.append(f"{flag}: {value!r} is not a duration such as 10s, 2m or 500ms")
            return timedelta(seconds=1)

    def integer(flag: str, value: object) -> int:
        try:
            return int(str(value))
        except ValueError:
            problems.append(f"{flag}: {value!r} is not a whole number")
            return 0

    def number(flag: str, value: object) -> float:
        try:
            return float(str(value))
        except ValueError:
            problems.append(f"{flag}: {value!r} is not a number")
            return 1.0

    address = str(a.address)
    flintlockd = str(a.flintlockd) or (
        join_endpoint(address, names.FLINTLOCKD_PORT) if address else ""
    )
    values = {
        "node_name": str(a.host_node),
        "address": address,
        "port": integer("--port", a.port),
        "flintlockd": flintlockd,
        "tls_cert_file": Path(str(a.tls_cert_file)),
        "tls_key_file": Path(str(a.tls_key_file)),
        "flintlockd_ca_file": Path(str(a.flintlockd_ca_file)),
        "flintlockd_cert_file": Path(str(a.flintlockd_cert_file)),
        "flintlockd_key_file": Path(str(a.flintlockd_key_file)),
        "trust_domain": str(a.trust_domain),
        "namespace": str(a.namespace),
        "ca_bundle_config_map": str(a.ca_bundle_config_map),
        "flintlockd_cert_dir": Path(str(a.flintlockd_cert_dir)),
        "certificate_duration": (
            duration("--certificate-duration", a.certificate_duration)
            if str(a.certificate_duration)
            else None
        ),
        "token_audience": str(a.token_audience),
        "call_timeout": duration("--call-timeout", a.call_timeout),
        "exec_open_timeout": duration("--exec-open-timeout", a.exec_open_timeout),
        "max_message_bytes": integer("--max-message-bytes", a.max_message_bytes),
        "max_streams": integer("--max-streams", a.max_streams),
        "max_streams_per_claim": integer("--max-streams-per-claim", a.max_streams_per_claim),
        "max_streams_per_holder": integer("--max-streams-per-holder", a.max_streams_per_holder),
        "relay_buffer_bytes": integer("--relay-buffer-bytes", a.relay_buffer_bytes),
        "stream_memory_bytes": integer("--stream-memory-bytes", a.stream_memory_bytes),
        "failed_auth_burst": integer("--failed-auth-burst", a.failed_auth_burst),
        "failed_auth_rate": number("--failed-auth-rate", a.failed_auth_rate),
        "identity_call_burst": integer("--identity-call-burst", a.identity_call_burst),
        "identity_call_rate": number("--identity-call-rate", a.identity_call_rate),
        "kubeconfig": Path(str(a.kubeconfig)) if a.kubeconfig else None,
        "health_probe_bind_address": str(a.health_probe_bind_address),
        "shutdown_grace": duration("--shutdown-grace", a.shutdown_grace),
        "host_paths": HostPaths(
            not_ready_dir=Path(str(a.not_ready_dir)),
            kvm_device=Path(str(a.kvm_device)),
            kvm_sysfs_dir=Path(str(a.kvm_sysfs_dir)),
            thin_pool=str(a.thin_pool),
            sys_block_dir=Path(str(a.sys_block_dir)),
        ),
        "sync_interval": duration("--sync-interval", a.sync_interval),
        "report_resync": duration("--report-resync", a.report_resync),
        "guard_namespace": str(a.guard_namespace),
        "guard_image": str(a.guard_image),
        "drain_timeout": duration("--drain-timeout", a.drain_timeout),
        "drain_guard_linger": duration("--drain-guard-linger", a.drain_guard_linger),
        "log_level": str(a.log_level),
        "log_format": str(a.log_format),
    }
    try:
        config = AgentConfig(**values)  # type: ignore[arg-type]
    except AgentConfigError as e:
        raise AgentConfigError(sorted([*problems, *e.problems])) from None
    if problems:
        raise AgentConfigError(sorted(problems))
    if check_host:
        check_host_addresses(config)
    return config
