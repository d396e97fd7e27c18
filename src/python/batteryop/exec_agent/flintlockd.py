"""This Host's flintlockd, as the agent reaches it: mutual TLS, one channel, four calls.

The agent only ever dials the one endpoint its config names, which `config.parse` has checked
is an address of this Host (EA-001). The channel verifies flintlockd's serving certificate
against the serving CA and the dialled address, and presents the agent's client certificate:
from files at start, or, with `--trust-domain`, from `certs.AgentCertificates` (EA-126,
EA-066). When the client certificate is renewed, `use_credentials` opens a new channel for new
calls; the old channel closes once its running calls end (an exec may run for hours: TLS checks
a certificate at the handshake only, so a running call is not affected).

Calls: `ServerInfo` and `GetMicroVM` with the call deadline; `ExecCommand` as a raw stream
the relay drives, whose answers arrive as `frames.Frame` (the bytes flintlockd sent, read no
further than the relay needs); and `SSHProxy` (`ssh_relay`), whose answers arrive as the bytes
flintlockd sent. gRPC errors pass through as `grpc.aio.AioRpcError`: the relays and the
servicer decide what each means to the caller.

Requirements: EA-001, EA-066, EA-126.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias

import grpc
import grpc.aio
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2
from batteryop.api.closing import AsyncClosing
from batteryop.exec_agent import memory
from batteryop.exec_agent.config import AgentConfig, AgentConfigError
from batteryop.exec_agent.frames import read_frame

ExecCall: TypeAlias = grpc.aio.StreamStreamCall
"""An open `ExecCommand` stream on flintlockd."""

EXEC_SERVICE: Final = microvmexec_pb2.DESCRIPTOR.services_by_name["MicroVMExec"].full_name
"""`microvmexec.services.api.v1alpha1.MicroVMExec`: flintlockd's, which the agent serves too."""
EXEC_COMMAND: Final = f"/{EXEC_SERVICE}/ExecCommand"
SSH_PROXY_SERVICE: Final = microvmsshproxy_pb2.DESCRIPTOR.services_by_name[
    "MicroVMSSHProxy"
].full_name
"""`microvmsshproxy.services.api.v1alpha1.MicroVMSSHProxy`: flintlockd's, which the agent
serves too."""
SSH_PROXY: Final = f"/{SSH_PROXY_SERVICE}/SSHProxy"


def _read(flag: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AgentConfigError([f"{flag}: cannot read {path}: {e.strerror or e}"]) from e
    if not data.strip():
        raise AgentConfigError([f"{flag}: {path} is empty"])
    return data


def channel_credentials(config: AgentConfig) -> grpc.ChannelCredentials:
    """Mutual TLS towards flintlockd from the config's files (EA-001); AgentConfigError if unreadable."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read("--flintlockd-ca-file", config.flintlockd_ca_file),
        private_key=_read("--flintlockd-key-file", config.flintlockd_key_file),
        certificate_chain=_read("--flintlockd-cert-file", config.flintlockd_cert_file),
    )


class Flintlockd(AsyncClosing):
    """A channel to this Host's flintlockd. Build it with `connect`; close with `aclose`."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        call_timeout: timedelta,
        target: str = "",
        options: Sequence[tuple[str, Any]] = (),
        drain_grace: timedelta = timedelta(hours=1),
    ) -> None:
        self._timeout = call_timeout.total_seconds()
        self._target = target
        self._options = list(options)
        self._drain_grace = drain_grace.total_seconds()
        self._retired: set[asyncio.Task[None]] = set()
        self._set_channel(channel)

    def _set_channel(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._microvm = microvms_pb2_grpc.MicroVMStub(channel)
        self._exec = channel.stream_stream(
            EXEC_COMMAND,
            request_serializer=microvmexec_pb2.ExecCommandRequest.SerializeToString,
            response_deserializer=read_frame,
        )
        # Responses stay the bytes flintlockd sent; `ssh_relay` checks each decodes.
        self._ssh = channel.stream_stream(
            SSH_PROXY, request_serializer=microvmsshproxy_pb2.SSHProxyRequest.SerializeToString
        )

    @classmethod
    def connect(
        cls, config: AgentConfig, credentials: grpc.ChannelCredentials | None = None
    ) -> Flintlockd:
        """A channel to `config.flintlockd` (lazily: the first call connects), with
        `credentials`, or the config's files when None.

        Messages up to `config.max_message_bytes` go either way, so whatever the agent accepts
        from a caller it can pass on. Each stream's receive window has a fixed size
        (`memory.transport_options`, EA-116): output the relay has not taken waits in flintlockd.
        """
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            # One connection per agent, not shared with other channels in the process.
            ("grpc.use_local_subchannel_pool", 1),
            # flintlockd is on this Host: after it restarts (new certificate, upgrade), dial
            # again within a second rather than gRPC's default backoff of up to two minutes.
            # Calls still fail at once while it is down (no wait_for_ready): a caller learns
            # why (refused, untrusted certificate) instead of waiting out a deadline. (Not
            # min_reconnect_backoff_ms: gRPC also takes it as the connect timeout.)
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # flintlockd's output for a stream waits in a window of fixed size (EA-116).
            *memory.transport_options(),
        ]
        creds = credentials if credentials is not None else channel_credentials(config)
        channel = grpc.aio.secure_channel(config.flintlockd, creds, options=options)
        return cls(
            channel, call_timeout=config.call_timeout, target=config.flintlockd, options=options
        )

    def use_credentials(self, credentials: grpc.ChannelCredentials) -> None:
        """New calls go over a new channel with `credentials`; the old one closes when its
        running calls have ended (or after the drain grace)."""
        old = self._channel
        self._set_channel(grpc.aio.secure_channel(self._target, credentials, options=self._options))
        task = asyncio.get_running_loop().create_task(old.close(grace=self._drain_grace))
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def aclose(self) -> None:
        await self._channel.close()
        for task in list(self._retired):
            task.cancel()

    async def server_info(self) -> microvms_pb2.ServerInfoResponse:
        return await self._microvm.ServerInfo(empty_pb2.Empty(), timeout=self._timeout)

    async def get_microvm(self, uid: str) -> microvms_pb2.GetMicroVMResponse:
        request = microvms_pb2.GetMicroVMRequest(uid=uid)
        return await self._microvm.GetMicroVM(request, timeout=self._timeout)

    def exec_command(self) -> ExecCall:
        """Open an `ExecCommand` stream with no deadline (a command may run for hours)."""
        call: ExecCall = self._exec()
        return call

    def ssh_proxy(self) -> ExecCall:
        """Open an `SSHProxy` stream with no deadline (a shell may stay open for hours); its
        responses are the serialized `SSHProxyResponse`s flintlockd sent."""
        call: ExecCall = self._ssh()
        return call
