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

The server owns what keeps running streams honest and callers bounded (EA-105, EA-106): the
`streams.ClaimStreams` every exec stream is admitted to, whose watch of the claims
(`CLAIMS_WATCH_TASK`) runs under `server.tasks` from `start` to `stop`. The authorizer it is
given counts failed authentications with `failed_auth_limiter(config)`.

Requirements: EA-002, EA-003, EA-105, EA-106.
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
from batteryop.exec_agent.config import AgentConfig, ConfigError, join_endpoint
from batteryop.exec_agent.errors import RefusalObserver
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.limits import FailedAuthLimiter
from batteryop.exec_agent.relay import ExecRelay
from batteryop.exec_agent.servicer import ExecServicer, MicroVMServicer
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
        raise ConfigError([f"--tls-cert-file: not a PEM certificate ({e})"]) from e
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    if ipaddress.ip_address(address) not in sans.get_values_for_type(x509.IPAddress):
        raise ConfigError([f"--tls-cert-file: the certificate does not name {address}"])


def failed_auth_limiter(config: AgentConfig) -> FailedAuthLimiter:
    """The per-address bucket of failed authentications the config asks for (EA-105)."""
    return FailedAuthLimiter(burst=config.failed_auth_burst, rate=config.failed_auth_rate)


def server_credentials(config: AgentConfig) -> grpc.ServerCredentials:
    """TLS with the serving certificate, no client certificates (EA-002)."""
    try:
        cert = config.tls_cert_file.read_bytes()
        key = config.tls_key_file.read_bytes()
    except OSError as e:
        raise ConfigError(
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
        )
        self.tasks = Supervisor()
        """Runs the claims watch (`CLAIMS_WATCH_TASK`) while the server runs."""
        self.tasks.add(CLAIMS_WATCH_TASK)
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.so_reuseport", 0),
            *memory.transport_options(),  # a caller's unread stdin: a fixed window (EA-116)
        ]
        self._server = grpc.aio.server(options=options)
        relay = ExecRelay(
            authorizer,
            flintlockd,
            streams=self.streams,
            open_timeout=config.exec_open_timeout.total_seconds(),
            buffer_bytes=config.relay_buffer_bytes,
            observer=observer,
        )
        self._server.add_generic_rpc_handlers((ExecServicer(relay, refusals).handler(),))
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
