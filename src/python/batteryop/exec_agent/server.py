"""The agent's gRPC server: the exec API over TLS on this Host's address (EA-002, EA-003).

`AgentServer` wires the servicers to one grpc.aio server listening on `config.listen_target`
with the serving certificate and key from the config's files (a certificate that does not name
the serving address is refused at start), or with the credentials it is given: with
`--trust-domain`, `certs.AgentCertificates.server_credentials()`, which serve each new
handshake with the newest certificate obtained by CSR (EA-068). Callers are not asked for a certificate: they prove who they are with a bearer token
(`auth`). gRPC's TLS offers HTTP/2 by ALPN and TLS 1.2 or newer. The largest message accepted,
either way, is `config.max_message_bytes`: a bigger one fails its call with RESOURCE_EXHAUSTED
before any handler sees it. Each stream's receive window has a fixed size, without BDP probing
(`memory.transport_options`, EA-116): a caller's unread stdin waits on its side.

    server = AgentServer(config, authorizer=authorizer, flintlockd=flintlockd)
    await server.start()        # server.port is the bound port (config.port 0: a free one)
    checks = server.tasks.checks()   # the claims watch, for /readyz (DP-107)
    ...
    await server.stop()         # running execs get config.shutdown_grace to finish

The server owns what keeps running streams honest and callers bounded (EA-105, EA-106,
EA-123): the `streams.ClaimStreams` every exec stream is admitted to (at most `--max-streams`,
`--max-streams-per-claim` and `--max-streams-per-holder`), whose watch of the claims
(`CLAIMS_WATCH_TASK`) runs under `server.tasks` from `start` to `stop`. The authorizer it is
given counts failed authentications with `failed_auth_limiter(config)` and calls per identity
with `identity_limiter(config)` (EA-120, EA-121).

Below the handlers, gRPC's own bounds (EA-124, `server_options` and `MAX_CONCURRENT_RPCS`; each
constant says what it bounds and why): calls in progress on the server, streams per
connection, idle connections, unfinished TLS handshakes, keepalive pings to callers, and the
enforcement of callers' pings (a connection pinging more than every 30 s without data is
closed; the client library's keepalive is within it). There is no cap on connections in gRPC
Python; `grpc.max_connection_age_ms` is not set: it would only stop new calls on old
connections (an exec stream may rightly last hours), bounding nothing a flood keeps.

Requirements: EA-002, EA-003, EA-105, EA-106, EA-120, EA-121, EA-123, EA-124.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Final

import grpc
import grpc.aio
from cryptography import x509

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2_grpc
from batteryop.exec_agent import memory
from batteryop.exec_agent.auth import Authorizer
from batteryop.exec_agent.config import AgentConfig, AgentConfigError, join_endpoint
from batteryop.exec_agent.errors import RefusalObserver
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.limits import FailedAuthLimiter, IdentityLimiter
from batteryop.exec_agent.relay import ExecRelay
from batteryop.exec_agent.servicer import ExecServicer, MicroVMServicer, SSHProxyServicer
from batteryop.exec_agent.ssh_relay import SSHProxyRelay
from batteryop.exec_agent.streams import ClaimStreams
from batteryop.exec_agent.timing import PhaseObserver
from batteryop.obs.supervisor import Supervisor

log = logging.getLogger(__name__)

CLAIMS_WATCH_TASK: Final = "exec-streams-claims"
"""The watch of the claims that running exec streams hold (EA-106)."""


class AgentServerError(RuntimeError):
    """The exec API could not listen on its address."""


def check_serving_certificate(cert_pem: bytes, address: str) -> None:
    """EA-002: the serving certificate must name the address the agent serves on."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise AgentConfigError([f"--tls-cert-file: not a PEM certificate ({e})"]) from e
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    if ipaddress.ip_address(address) not in sans.get_values_for_type(x509.IPAddress):
        raise AgentConfigError([f"--tls-cert-file: the certificate does not name {address}"])


def failed_auth_limiter(config: AgentConfig) -> FailedAuthLimiter:
    """The per-address bucket of failed authentications the config asks for (EA-105)."""
    return FailedAuthLimiter(burst=config.failed_auth_burst, rate=config.failed_auth_rate)


def identity_limiter(config: AgentConfig) -> IdentityLimiter:
    """The per-identity bucket of calls the config asks for (EA-120, EA-121)."""
    return IdentityLimiter(burst=config.identity_call_burst, rate=config.identity_call_rate)


MAX_CONCURRENT_RPCS: Final = 4096
"""RPCs in progress on the server at once (`maximum_concurrent_rpcs`); gRPC itself refuses
more with RESOURCE_EXHAUSTED before any handler runs. A backstop for memory and tasks, shared by
everyone, not a fairness rule (the buckets and stream caps are): it sits above every limit that
can hold calls legitimately, the default `--max-streams` plus the refused calls the two
buckets may hold (1,024 each, `limits`)."""

MAX_STREAMS_PER_CONNECTION: Final = 128
"""`grpc.max_concurrent_streams`: HTTP/2 streams (calls) open at once on one connection. A
client over it waits for a free stream instead of failing; it is above the default
`--max-streams-per-holder` (a Holder's client keeps one connection per agent), so that Holder
never waits on it, while a flood must open connections (each a TLS handshake of its own)."""

MAX_CONNECTION_IDLE_MS: Final = 5 * 60 * 1000
"""`grpc.max_connection_idle_ms`: a connection without a call for 5 minutes is closed (GOAWAY);
a client reconnects at its next call. Bounds how long an idle connection keeps its memory and
file descriptor. gRPC Python has no cap on the number of connections: that is the process's
file descriptors (the Pod's RLIMIT_NOFILE); this, the handshake timeout and the per-address
bucket bound what each one costs."""

SERVER_HANDSHAKE_TIMEOUT_MS: Final = 10 * 1000
"""`grpc.server_handshake_timeout_ms`: a connection must finish its TLS handshake within 10 s
(gRPC's default is 120 s), so connections that never finish one are dropped soon."""

KEEPALIVE_TIME_MS: Final = 60 * 1000
KEEPALIVE_TIMEOUT_MS: Final = 20 * 1000
"""`grpc.keepalive_time_ms`, `grpc.keepalive_timeout_ms`: the server pings each connection after
a minute without traffic and closes it when the ping is not answered within 20 s, so a caller
whose machine or network went away frees its exec streams (and their slots) within 80 s, not
after TCP's own timeouts (hours)."""

MIN_PING_INTERVAL_MS: Final = 30 * 1000
"""`grpc.http2.min_ping_interval_without_data_ms`: a client's pings must be at least 30 s apart
while the server sends no data; a ping sooner is a strike. The client library pings every
`KEEPALIVE_TIME_MS` of `batteryop.client._transport` (5 minutes, gRPC's default for this), ten
times this; other clients may ping as often as every 30 s."""

MAX_PING_STRIKES: Final = 2
"""`grpc.http2.max_ping_strikes`: after this many strikes the connection is closed (GOAWAY
`too_many_pings`): pings are answered by the server's transport for free otherwise, a flood
the buckets never see."""

KEEPALIVE_PERMIT_WITHOUT_CALLS: Final = 0
"""`grpc.keepalive_permit_without_calls`: a ping on a connection with no call is a strike; an
idle connection needs no keepalive (it is closed after `MAX_CONNECTION_IDLE_MS` anyway)."""


def server_options(config: AgentConfig) -> list[tuple[str, Any]]:
    """The gRPC server's channel arguments (each constant above says what it bounds and why)."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
        ("grpc.server_handshake_timeout_ms", SERVER_HANDSHAKE_TIMEOUT_MS),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_permit_without_calls", KEEPALIVE_PERMIT_WITHOUT_CALLS),
        *memory.transport_options(),  # a caller's unread stdin: a fixed window (EA-116)
    ]


def server_credentials(config: AgentConfig) -> grpc.ServerCredentials:
    """TLS with the serving certificate, no client certificates (EA-002)."""
    try:
        cert = config.tls_cert_file.read_bytes()
        key = config.tls_key_file.read_bytes()
    except OSError as e:
        raise AgentConfigError(
            [f"--tls-cert-file/--tls-key-file: cannot read {e.filename}: {e.strerror}"]
        ) from e
    check_serving_certificate(cert, config.address)
    return grpc.ssl_server_credentials([(key, cert)], require_client_auth=False)


class AgentServer:
    """The exec API on one grpc.aio server."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        authorizer: Authorizer,
        flintlockd: Flintlockd,
        observer: PhaseObserver | None = None,
        credentials: grpc.ServerCredentials | None = None,
        refusals: RefusalObserver | None = None,
    ) -> None:
        self._config = config
        self.streams = ClaimStreams(
            authorizer,
            max_streams=config.max_streams,
            max_per_claim=config.max_streams_per_claim,
            max_per_holder=config.max_streams_per_holder,  # EA-123
        )
        self.tasks = Supervisor()
        """Runs the claims watch (`CLAIMS_WATCH_TASK`) while the server runs."""
        self.tasks.add(CLAIMS_WATCH_TASK)
        self._server = grpc.aio.server(  # EA-124
            options=server_options(config), maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS
        )
        relay = ExecRelay(
            authorizer,
            flintlockd,
            streams=self.streams,
            open_timeout=config.exec_open_timeout.total_seconds(),
            buffer_bytes=config.relay_buffer_bytes,
            observer=observer,
        )
        ssh = SSHProxyRelay.like(relay)  # EA-130: the exec path's authorization and slots
        self._server.add_generic_rpc_handlers(
            (ExecServicer(relay, refusals).handler(), SSHProxyServicer(ssh, refusals).handler())
        )
        microvms_pb2_grpc.add_MicroVMServicer_to_server(
            MicroVMServicer(authorizer, flintlockd, refusals), self._server
        )
        self._credentials = credentials or server_credentials(config)
        self.port = 0

    @property
    def target(self) -> str:
        """`address:port` where the exec API listens (after `start`)."""
        return join_endpoint(self._config.address, self.port)

    async def start(self) -> None:
        try:
            port = self._server.add_secure_port(self._config.listen_target, self._credentials)
        except RuntimeError as e:
            raise AgentServerError(f"cannot listen on {self._config.listen_target}: {e}") from e
        if port == 0:
            raise AgentServerError(f"cannot listen on {self._config.listen_target}")
        self.port = port
        self.tasks.start(CLAIMS_WATCH_TASK, self.streams.run)  # EA-106
        await self._server.start()
        log.info("Exec API listening", extra={"address": self.target})

    async def stop(self) -> None:
        """Stop taking calls; running ones get the shutdown grace, then are cancelled."""
        try:
            await self._server.stop(self._config.shutdown_grace.total_seconds())
        finally:
            await self.tasks.stop()
