"""Faults a test can inject into a running fake flintlockd (TD-011), and what it records.

The control API (`control.py`) sets these; the gRPC services (`services.py`, `execution.py`) read
them. Everything runs on the fake's one event loop, so no locking is needed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2

DEFAULT_CUT_CODE = grpc.StatusCode.UNKNOWN
DEFAULT_CUT_MESSAGE = "reading guest-agent exec frame: unexpected EOF"


@dataclass(frozen=True)
class CreateFailure:
    """How CreateMicroVM fails while `remaining` > 0."""

    code: grpc.StatusCode
    message: str


@dataclass(frozen=True)
class StreamCut:
    """End the next ExecCommand stream with a status instead of its exit code.

    after_chunks None: let the command finish and relay all its output, then fail instead of
    sending the exit code. A number: fail (killing the command) once that many stdout/stderr
    messages went out; 0 cuts before any output.
    """

    code: grpc.StatusCode = DEFAULT_CUT_CODE
    message: str = DEFAULT_CUT_MESSAGE
    after_chunks: int | None = None


@dataclass(frozen=True)
class ExecTiming:
    """Where one exec's time went inside the fake: starting the command's process (fork and
    exec, the stand-in's own cost, no part of real flintlockd's), then the command running
    until its exit was reaped."""

    spawn_seconds: float
    run_seconds: float


STDIN_RECORD_BYTES = 1024 * 1024
"""The most stdin bytes an `ExecSession` keeps (it counts them all)."""


@dataclass
class ExecSession:
    """One ExecCommand stream that passed the checks: the stdin the fake took from it (the
    first `STDIN_RECORD_BYTES`, and how many in all), and whether its RPC has ended (the command
    then is killed or exited)."""

    start: microvmexec_pb2.ExecStart
    stdin: bytearray = field(default_factory=bytearray)
    stdin_bytes: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def took(self, data: bytes) -> None:
        self.stdin_bytes += len(data)
        room = STDIN_RECORD_BYTES - len(self.stdin)
        if room > 0:
            self.stdin += data[:room]


@dataclass
class Faults:
    """The fake's current faults and its record of exec requests."""

    create_delay: float = 0.0
    create_delay_store_first: bool = True
    create_failure: CreateFailure | None = None
    create_failures_left: int = 0
    cut_next_exec: StreamCut | None = None
    exec_history: list[microvmexec_pb2.ExecStart] = field(default_factory=list)
    exec_sessions: list[ExecSession] = field(default_factory=list)
    """One per entry of `exec_history`, in the same order."""
    exec_timings: list[ExecTiming] = field(default_factory=list)
    """One entry per command that started, in the order they exited."""

    def take_create_failure(self) -> CreateFailure | None:
        """The failure for this CreateMicroVM call, counting it down; None to succeed."""
        if self.create_failure is None or self.create_failures_left <= 0:
            return None
        self.create_failures_left -= 1
        return self.create_failure

    def take_stream_cut(self) -> StreamCut | None:
        cut, self.cut_next_exec = self.cut_next_exec, None
        return cut
