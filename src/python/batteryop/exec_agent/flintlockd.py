"""This Host's flintlockd, as the agent reaches it: mutual TLS, one channel, three calls.

The agent only ever dials the one endpoint its config names, which `config.parse` has checked
is an address of this Host (EA-001). The channel verifies flintlockd's serving certificate
against the serving CA and the dialled address, and presents the agent's client certificate.
Until the CSR flow exists, planned(EA-060..EA-068), the certificate, key and CA are read
from files at start.

Calls: `ServerInfo` and `GetMicroVM` with the call deadline, and `ExecCommand` as a raw stream
the relay drives. gRPC errors pass through as `grpc.aio.AioRpcError`: the relay and the
servicer decide what each means to the caller.

Requirements: EA-001.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import grpc
import grpc.aio
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2_grpc
from batteryop.exec_agent.config import AgentConfig, ConfigError

ExecCall: TypeAlias = grpc.aio.StreamStreamCall
"""An open `ExecCommand` stream on flintlockd."""


def _read(flag: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError([f"{flag}: cannot read {path}: {e.strerror or e}"]) from e
    if not data.strip():
        raise ConfigError([f"{flag}: {path} is empty"])
    return data


def channel_credentials(config: AgentConfig) -> grpc.ChannelCredentials:
    """Mutual TLS towards flintlockd from the config's files (EA-001); ConfigError if unreadable."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read("--flintlockd-ca-file", config.flintlockd_ca_file),
        private_key=_read("--flintlockd-key-file", config.flintlockd_key_file),
        certificate_chain=_read("--flintlockd-cert-file", config.flintlockd_cert_file),
    )


class Flintlockd:
    """A channel to this Host's flintlockd. Build it with `connect`; close with `aclose`."""

    def __init__(self, channel: grpc.aio.Channel, *, call_timeout: timedelta) -> None:
        self._channel = channel
        self._timeout = call_timeout.total_seconds()
        self._microvm = microvms_pb2_grpc.MicroVMStub(channel)
        self._exec = microvmexec_pb2_grpc.MicroVMExecStub(channel)

    @classmethod
    def connect(cls, config: AgentConfig) -> Flintlockd:
        """A channel to `config.flintlockd` (lazily: the first call connects).

        Messages up to `config.max_message_bytes` go either way, so whatever the agent accepts
        from a caller it can pass on.
        """
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            # One connection per agent, not shared with other channels in the process.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        channel = grpc.aio.secure_channel(
            config.flintlockd, channel_credentials(config), options=options
        )
        return cls(channel, call_timeout=config.call_timeout)

    async def __aenter__(self) -> Flintlockd:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._channel.close()

    async def server_info(self) -> microvms_pb2.ServerInfoResponse:
        return await self._microvm.ServerInfo(empty_pb2.Empty(), timeout=self._timeout)

    async def get_microvm(self, uid: str) -> microvms_pb2.GetMicroVMResponse:
        request = microvms_pb2.GetMicroVMRequest(uid=uid)
        return await self._microvm.GetMicroVM(request, timeout=self._timeout)

    def exec_command(self) -> ExecCall:
        """Open an `ExecCommand` stream with no deadline (a command may run for hours)."""
        call: ExecCall = self._exec.ExecCommand()
        return call
