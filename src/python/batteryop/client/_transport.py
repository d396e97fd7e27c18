"""How a command reaches a claimed MicroVM: `GrpcExecTransport`, the `ExecTransport` (`_exec`)
over gRPC.

The Exec Agent serves flintlock's `microvmexec.services.api.v1alpha1.MicroVMExec` unchanged
(EA-003), plus a bearer token; its messages are encoded and decoded by `_wire`, without
protobuf. `GrpcExecTransport` dials the agent at the claim's
`status.host.agentAddress` over TLS, verifying the agent's serving certificate against the CA
the consumer configured (never the system roots), and sends `authorization: Bearer <token>`
as metadata on every call (CC-020). It streams stdin up, relays stdout and stderr as they
arrive, and returns the exit code from the stream's `exit_code` message, the only normal end
of an exec stream (flintlock-api.md §8.5): a stream that ends any other way is an
`ExecUnavailableError`, never an exit code. The channel keeps its connection alive while a call
is open (`KEEPALIVE_OPTIONS`), no more often than the agent permits.

A claim depends on the Protocol (`_exec`), not on gRPC, so a test (or a consumer's own test)
can run commands without an agent, and a client imports this module on a thread of its own
while its first API requests wait on the network. The exec tests here dial the fake
flintlockd directly over TLS, since it serves the very same service; the path through the
Exec Agent (token checks and relay) is tested end to end once the agent lands on main.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable

import grpc

from batteryop.api._compat import TIMEOUT_ERRORS, within
from batteryop.client import _wire
from batteryop.client._exceptions import ExecPermissionError, ExecUnavailableError
from batteryop.client._exec import ExecRequest, OutputSink, check_serving_ca, deliver

EXEC_METHOD = "/microvmexec.services.api.v1alpha1.MicroVMExec/ExecCommand"
"""The wire name of the one RPC the client calls (the Exec Agent serves flintlock's)."""

SSH_METHOD = "/microvmsshproxy.services.api.v1alpha1.MicroVMSSHProxy/SSHProxy"
"""flintlock's SSH proxy, which the Exec Agent relays (`battery shell`, `battery ssh-proxy`)."""

STDIN_CHUNK_BYTES = 64 * 1024
"""The largest stdin message sent (gRPC's default limit per message is 4 MiB)."""

KEEPALIVE_TIME_MS = 5 * 60 * 1000
"""While a call is open, the channel pings the agent after 5 minutes without traffic and gives
the connection up when no answer comes within `KEEPALIVE_TIMEOUT_MS`: an exec into a Host that
went away fails within minutes instead of hanging. 5 minutes is the soonest gRPC servers accept
by default, so agents of every version take it; the agent itself accepts pings 30 s apart
(`exec_agent.server.MIN_PING_INTERVAL_MS`). A client pinging sooner than its server accepts is
cut off (GOAWAY `too_many_pings`), with its running execs."""

KEEPALIVE_TIMEOUT_MS = 20 * 1000

KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 0),  # no pings on an idle connection (the agent's rule)
    ("grpc.http2.max_pings_without_data", 0),  # keep pinging through a quiet exec
)
"""The channel's keepalive settings, within what the Exec Agent permits."""

_PERMISSION_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class GrpcExecTransport:
    """`ExecTransport` over gRPC and TLS to an Exec Agent (or anything serving MicroVMExec).

    `serving_ca` is the PEM of the CA that signs agents' serving certificates. One channel is
    kept per address and closed by `aclose()`.
    """

    def __init__(
        self,
        serving_ca: bytes,
        *,
        open_timeout: float = 10.0,
        server_name: str | None = None,
    ) -> None:
        self._credentials = grpc.ssl_channel_credentials(
            root_certificates=check_serving_ca(serving_ca)
        )
        self._open_timeout = open_timeout
        self._options: list[tuple[str, str | int]] = [*KEEPALIVE_OPTIONS]
        if server_name:
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.secure_channel(address, self._credentials, options=self._options)
            self._channels[address] = channel
        return channel

    def connect(self, address: str) -> None:
        """Start connecting to `address` (TLS handshake included) without waiting, so that the
        first `run` there finds the connection made or under way."""
        self._channel(address).get_state(try_to_connect=True)

    async def aclose(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()

    async def _ready(self, address: str) -> grpc.aio.Channel:
        """The channel to `address`, connected within the open timeout: an agent that is not
        there fails fast with a clear cause instead of hanging the stream. A kept channel
        that is already connected goes straight on (no task, no timer)."""
        if not address:
            raise ExecUnavailableError("no Exec Agent address to dial")
        channel = self._channel(address)
        try:
            if channel.get_state() != grpc.ChannelConnectivity.READY:
                await within(channel.channel_ready(), self._open_timeout)
        except (*TIMEOUT_ERRORS, grpc.aio.AioRpcError) as e:
            raise ExecUnavailableError(
                f"could not connect to the Exec Agent at {address} within "
                f"{self._open_timeout:g}s (is its certificate signed by the configured CA?)"
            ) from e
        return channel

    async def run(
        self,
        address: str,
        token: str,
        request: ExecRequest,
        *,
        stdin: AsyncIterable[bytes] | None,
        stdout: OutputSink,
        stderr: OutputSink,
        errors: Callable[[str], None],
    ) -> int:
        channel = await self._ready(address)
        # The messages go as bytes: `_requests` encodes them, `_wire` decodes the answers.
        call = channel.stream_stream(EXEC_METHOD, response_deserializer=_wire.read_response)(
            _requests(request, stdin),
            metadata=(("authorization", f"Bearer {token}"),),  # CC-020: on every call
        )
        try:
            async for kind, value in call:
                if kind == _wire.STDOUT and isinstance(value, bytes):
                    await deliver(stdout, value)
                elif kind == _wire.STDERR and isinstance(value, bytes):
                    await deliver(stderr, value)
                elif kind == _wire.ERROR and isinstance(value, str):
                    errors(value)
                elif kind == _wire.EXIT_CODE and isinstance(value, int):
                    return value
                elif kind == _wire.MALFORMED:
                    call.cancel()  # nothing after it can be trusted; the command is killed
                    raise ExecUnavailableError(
                        f"the Exec Agent at {address} sent a malformed answer: {value}"
                    )
        except grpc.aio.AioRpcError as e:
            raise _exec_error(address, e) from e
        except asyncio.CancelledError:
            call.cancel()  # the agent (and flintlockd) kill the command
            raise
        raise ExecUnavailableError(f"the exec stream from {address} ended without an exit code")

    async def proxy_ssh(
        self,
        address: str,
        token: str,
        microvm_uid: str,
        upstream: AsyncIterable[bytes],
        downstream: OutputSink,
    ) -> None:
        """Relay bytes to the guest's sshd and back through the agent's `MicroVMSSHProxy`
        (EA-130), until the guest closes its side (the call ends OK): `upstream` ending
        half-closes towards the guest. A call that fails is an `ExecUnavailableError` (or an
        `ExecPermissionError` when refused)."""
        channel = await self._ready(address)
        call = channel.stream_stream(SSH_METHOD, response_deserializer=_wire.read_ssh_response)(
            _ssh_requests(microvm_uid, upstream),
            metadata=(("authorization", f"Bearer {token}"),),  # CC-020: on every call
        )
        try:
            async for kind, value in call:
                if kind == _wire.MALFORMED:
                    call.cancel()
                    raise ExecUnavailableError(
                        f"the Exec Agent at {address} sent a malformed answer: {value}"
                    )
                if isinstance(value, bytes) and value:
                    await deliver(downstream, value)
        except grpc.aio.AioRpcError as e:
            raise _exec_error(address, e) from e
        except asyncio.CancelledError:
            call.cancel()  # the agent (and flintlockd) close the guest's connection
            raise


async def _ssh_requests(uid: str, upstream: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    yield _wire.encode_ssh_uid(uid)
    async for data in upstream:
        for offset in range(0, len(data), STDIN_CHUNK_BYTES):
            yield _wire.encode_ssh_data(data[offset : offset + STDIN_CHUNK_BYTES])


async def _requests(
    request: ExecRequest, stdin: AsyncIterable[bytes] | None
) -> AsyncIterator[bytes]:
    yield request.start_message()
    if stdin is None or not request.has_stdin:
        return
    async for data in stdin:
        for offset in range(0, len(data), STDIN_CHUNK_BYTES):
            yield _wire.encode_stdin(data[offset : offset + STDIN_CHUNK_BYTES])
    yield _wire.STDIN_EOF


def _exec_error(
    address: str, e: grpc.aio.AioRpcError
) -> ExecUnavailableError | ExecPermissionError:
    code = e.code()
    details = e.details() or ""
    message = f"the Exec Agent at {address} answered {code.name}" + (
        f": {details}" if details else ""
    )
    if code in _PERMISSION_CODES:
        return ExecPermissionError(message)
    return ExecUnavailableError(message)
