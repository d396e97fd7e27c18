"""The fake battery's Hosts and its connections to their flintlockd (TD-002).

Every MicroVM the fake battery creates, inspects, runs a hook in or deletes goes through a
flintlockd's gRPC API on the Host the VM is placed on: `MicroVM` (CreateMicroVM, GetMicroVM,
DeleteMicroVM, ServerInfo) and `MicroVMExec.ExecCommand`, over one channel per Host, as poolmgrd
does. Host TLS files are read when the channel is dialled, i.e. at start or when the Host's
address or TLS changes (BA-061).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

import grpc
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from battery_protos.flintlock.types import microvm_pb2

log = logging.getLogger(__name__)

# battery v0.3.3+ refuses to create MicroVMs on an older flintlockd.
MIN_FLINTLOCK_VERSION = (0, 15, 2)

# Reconnect to a Host that came back within a fraction of a second (gRPC's default backoff
# starts at 1 s and grows to 120 s).
CHANNEL_OPTIONS = (
    # Each channel its own connections, as every grpc-go ClientConn of the real battery has.
    # Python's gRPC shares them process-wide by default: a FakeBattery started after another
    # saw a Host down inherited that connection's reconnect backoff, and its first provision
    # failed at once ("Connection refused") with the Host up again, so a Pool filled only at
    # the next reconcile tick of an injected clock that a test may never advance.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-(\d+)-g[0-9a-f]+)?(?:[-+].*)?$")


@dataclass(frozen=True)
class HostTLSConfig:
    """How to reach a Host's flintlockd: plaintext (insecure) or TLS with files on this machine."""

    insecure: bool = True
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def problem(self) -> str | None:
        """Why this setting is malformed, or None (battery's HostTLS rules)."""
        files = (self.ca_file, self.cert_file, self.key_file)
        if self.insecure:
            if any(files):
                return "tls.insecure must not be combined with ca_file, cert_file or key_file"
            return None
        if not self.ca_file:
            return "tls.ca_file is required unless tls.insecure is set"
        if bool(self.cert_file) != bool(self.key_file):
            return "tls.cert_file and tls.key_file must be set together"
        return None


@dataclass(frozen=True)
class HostConfig:
    """One Host battery may place MicroVMs on: its name and its flintlockd gRPC target."""

    name: str
    address: str
    tls: HostTLSConfig = field(default_factory=HostTLSConfig)


class HostTLSFilesError(Exception):
    """A Host's TLS files could not be read."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(f"host {host}: reading tls files: {detail}")
        self.host = host


class FlintlockVersionError(Exception):
    """A Host's flintlockd is too old, or its version could not be learned."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(f"host {host}: {detail}")
        self.host = host


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a flintlockd version; a `git describe` form counts as its base."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


@dataclass(frozen=True)
class ExecResult:
    """How a command run through MicroVMExec ended: its exit code, or why there is none."""

    exit_code: int | None
    error: str = ""
    # The RPC itself failed (as opposed to a terminal reply from the guest agent).
    rpc_failed: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if self.exit_code is None:
            return self.error or "no exit code"
        detail = f"exit code {self.exit_code}"
        return f"{detail}: {self.error}" if self.error else detail


class HostConnection:
    """A registered Host: its cordon state and its one channel to flintlockd."""

    def __init__(self, config: HostConfig, now: datetime) -> None:
        self.config = config
        self.cordoned = False
        self.cordoned_reason = ""
        self.cordoned_at: datetime | None = None
        self.updated_at = now
        self.flintlock_version = ""
        self.version_checked = False
        self.placements = 0
        self._channel: grpc.aio.Channel | None = None
        self._microvm: microvms_pb2_grpc.MicroVMStub | None = None
        self._exec: microvmexec_pb2_grpc.MicroVMExecStub | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def address(self) -> str:
        return self.config.address

    def dial(self) -> None:
        """Open the channel, reading the TLS files now (raises HostTLSFilesError)."""
        tls = self.config.tls
        if tls.insecure:
            channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        else:
            try:
                root = _read(tls.ca_file)
                key = _read(tls.key_file) if tls.key_file else None
                cert = _read(tls.cert_file) if tls.cert_file else None
            except OSError as err:
                raise HostTLSFilesError(self.name, str(err)) from err
            creds = grpc.ssl_channel_credentials(root, key, cert)
            channel = grpc.aio.secure_channel(self.address, creds, options=CHANNEL_OPTIONS)
        self._channel = channel
        self._microvm = microvms_pb2_grpc.MicroVMStub(channel)
        self._exec = microvmexec_pb2_grpc.MicroVMExecStub(channel)
        self.version_checked = False

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
        self._channel = None
        self._microvm = None
        self._exec = None

    @property
    def microvm(self) -> microvms_pb2_grpc.MicroVMStub:
        if self._microvm is None:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details=f"host {self.name} is not connected",
            )
        return self._microvm

    async def check_version(self, deadline: float) -> str:
        """Ask flintlockd its version; raise FlintlockVersionError below v0.15.2."""
        try:
            info = await self.microvm.ServerInfo(empty_pb2.Empty(), timeout=deadline)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise FlintlockVersionError(
                    self.name, "flintlockd has no ServerInfo: older than v0.15.0"
                ) from err
            raise FlintlockVersionError(
                self.name, f"checking flintlockd version: {err.code().name}: {err.details()}"
            ) from err
        self.flintlock_version = info.version
        parsed = parse_version(info.version)
        if parsed is None:
            raise FlintlockVersionError(
                self.name, f"unparseable flintlockd version {info.version!r}"
            )
        if parsed < MIN_FLINTLOCK_VERSION:
            raise FlintlockVersionError(
                self.name, f"flintlockd {info.version} is older than the minimum v0.15.2"
            )
        return info.version

    async def ensure_version(self, deadline: float) -> None:
        """The pre-create version check, cached per connection once it passes."""
        if self.version_checked:
            return
        await self.check_version(deadline)
        self.version_checked = True

    async def create(self, spec: microvm_pb2.MicroVMSpec, deadline: float) -> microvm_pb2.MicroVM:
        reply = await self.microvm.CreateMicroVM(
            microvms_pb2.CreateMicroVMRequest(microvm=spec), timeout=deadline
        )
        return reply.microvm

    async def get(self, uid: str, deadline: float) -> microvm_pb2.MicroVM:
        reply = await self.microvm.GetMicroVM(
            microvms_pb2.GetMicroVMRequest(uid=uid), timeout=deadline
        )
        return reply.microvm

    async def delete(self, uid: str, deadline: float) -> None:
        """DeleteMicroVM; NOT_FOUND counts as deleted. Other failures raise AioRpcError."""
        try:
            await self.microvm.DeleteMicroVM(
                microvms_pb2.DeleteMicroVMRequest(uid=uid), timeout=deadline
            )
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise

    async def exec_shell(self, uid: str, command: str, deadline: float | None) -> ExecResult:
        """Run command with `shell` and no stdin through MicroVMExec, as battery's hooks do."""
        if self._exec is None:
            return ExecResult(None, f"host {self.name} is not connected", rpc_failed=True)
        start = microvmexec_pb2.ExecStart(uid=uid, cmd=command, shell=True, has_stdin=False)

        async def requests() -> AsyncIterator[microvmexec_pb2.ExecCommandRequest]:
            yield microvmexec_pb2.ExecCommandRequest(start=start)

        errors: list[str] = []
        call = self._exec.ExecCommand(requests(), timeout=deadline)
        try:
            async for reply in call:
                which = reply.WhichOneof("payload")
                if which == "exit_code":
                    call.cancel()
                    return ExecResult(reply.exit_code, "; ".join(errors))
                if which == "error":
                    errors.append(reply.error)
        except grpc.aio.AioRpcError as err:
            return ExecResult(None, f"exec: {err.code().name}: {err.details()}", rpc_failed=True)
        if errors:
            return ExecResult(None, "; ".join(errors))
        return ExecResult(None, "exec stream ended without an exit code", rpc_failed=True)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()
