"""What every exec transport shares, with no gRPC in it: the `ExecTransport` Protocol, the
`ExecRequest` it is given, and the small helpers for output and stdin.

A client depends on these only, so importing it does not import gRPC (25-40 ms); protobuf it
never imports (`_wire` encodes the messages). Its `GrpcExecTransport` (`_transport`) is
imported when a claim binds, to connect to the claim's agent ahead of the first exec, or at
that exec. The `battery` command imports it on a thread of its own meanwhile, while its
claim's API requests wait on the network (docs/dev/client-performance.md).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from batteryop.client._exceptions import ConfigError
from batteryop.client._wire import encode_start

OutputSink = Callable[[bytes], "Awaitable[None] | None"]
"""Where a stream of output goes as it arrives: a plain or an async function of the bytes."""


@dataclass(frozen=True)
class ExecRequest:
    """One command for one MicroVM: argv run directly (no shell), with env, cwd and user."""

    microvm_uid: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    user: str = ""
    timeout_seconds: int = 0
    has_stdin: bool = False

    def start_message(self) -> bytes:
        """The stream's first message, `ExecCommandRequest{start}`, on the wire (`_wire`)."""
        return encode_start(self)


class ExecTransport(Protocol):
    """Runs one command to its end and returns its exit code (the claim's only IO for exec)."""

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
    ) -> int: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SSHTransport(Protocol):
    """An `ExecTransport` that can also relay the guest's sshd (`GrpcExecTransport` can; a
    consumer's own exec double need not)."""

    async def proxy_ssh(
        self,
        address: str,
        token: str,
        microvm_uid: str,
        upstream: AsyncIterable[bytes],
        downstream: OutputSink,
    ) -> None: ...


def check_serving_ca(serving_ca: bytes) -> bytes:
    """`serving_ca` (PEM), refused with `ConfigError` when empty."""
    if not serving_ca.strip():
        raise ConfigError("the Exec Agent's serving CA is empty")
    return serving_ca


async def deliver(sink: OutputSink, data: bytes) -> None:
    result = sink(data)
    if inspect.isawaitable(result):
        await result


async def bytes_source(data: bytes) -> AsyncIterator[bytes]:
    """The whole of `data` as one stdin stream."""
    if data:
        yield data
