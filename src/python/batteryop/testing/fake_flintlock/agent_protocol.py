"""The host side of flintlock's guest agent control protocol (flintlock-api.md §6.2), as
flintlockd speaks it to relay `MicroVMExec` (§8.5): one operation per connection, frames of
1 byte type, 4 bytes big-endian length and the payload; the first frame a JSON request.

`ping` is the readiness check; `open_exec` sends an exec request built from an `ExecStart`,
field for field, and returns the connection for the relay (`fake_flintlock.qemu`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Final

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api._compat import within

VERSION: Final = 1
MAX_FRAME_BYTES: Final = 16 << 20
_HEADER = struct.Struct(">BI")


class Frame(enum.IntEnum):
    REQUEST = 1
    STDIN = 2
    STDIN_EOF = 3
    STDOUT = 4
    STDERR = 5
    EXIT = 6
    ERROR = 7


class AgentProtocolError(ConnectionError):
    """The agent could not be reached, or broke the protocol."""


@dataclass
class AgentConnection:
    """One control connection to a guest agent."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def send(self, kind: Frame, payload: bytes = b"") -> None:
        if len(payload) > MAX_FRAME_BYTES:
            raise AgentProtocolError(f"frame of {len(payload)} bytes exceeds the agent's limit")
        self.writer.write(_HEADER.pack(kind, len(payload)) + payload)
        await self.writer.drain()

    async def receive(self) -> tuple[int, bytes] | None:
        """The next frame (type, payload), or None when the agent closed the connection at a
        frame boundary."""
        try:
            header = await self.reader.readexactly(_HEADER.size)
        except asyncio.IncompleteReadError as err:
            if err.partial:
                raise AgentProtocolError("the agent closed the connection mid-frame") from None
            return None
        kind, length = _HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise AgentProtocolError(f"the agent sent a frame of {length} bytes")
        try:
            return kind, await self.reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise AgentProtocolError("the agent closed the connection mid-frame") from None

    async def close(self) -> None:
        """Close both directions (the agent then stops a running command: SIGTERM, then
        SIGKILL 5 s later). Never half-close: the agent reads that as the host going away."""
        self.writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self.writer.wait_closed()


def request(op: str, exec_: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"version": VERSION, "op": op}
    if exec_ is not None:
        body["exec"] = exec_
    return json.dumps(body).encode()


def exec_body(start: microvmexec_pb2.ExecStart) -> dict[str, Any]:
    """The agent's `Exec` from an `ExecStart`, one field for one (empty ones left out, as Go's
    omitempty does)."""
    body: dict[str, Any] = {"cmd": start.cmd}
    optional = {
        "args": list(start.args),
        "cwd": start.cwd,
        "env": dict(start.env),
        "shell": start.shell,
        "user": start.user,
        "timeout_sec": start.timeout_seconds,
        "has_stdin": start.has_stdin,
    }
    body.update({key: value for key, value in optional.items() if value})
    return body


async def connect(host: str, port: int, timeout: float) -> AgentConnection:
    try:
        reader, writer = await within(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as err:
        raise AgentProtocolError(f"dialing guest agent at {host}:{port}: {err}") from err
    return AgentConnection(reader, writer)


def exit_code(payload: bytes) -> int:
    return int(json.loads(payload)["code"])


def error_message(payload: bytes) -> str:
    return str(json.loads(payload).get("msg", ""))


async def ping(host: str, port: int, timeout: float) -> bool:
    """True when the agent answered a ping with exit 0 within timeout seconds."""
    try:
        async with asyncio.timeout(timeout):
            conn = await connect(host, port, timeout)
            try:
                await conn.send(Frame.REQUEST, request("ping"))
                frame = await conn.receive()
            finally:
                await conn.close()
    except (AgentProtocolError, OSError, TimeoutError):
        return False
    return frame is not None and frame[0] == Frame.EXIT and exit_code(frame[1]) == 0


async def open_exec(
    host: str, port: int, start: microvmexec_pb2.ExecStart, timeout: float
) -> AgentConnection:
    """A connection on which the exec request for `start` has been sent."""
    conn = await connect(host, port, timeout)
    try:
        await conn.send(Frame.REQUEST, request("exec", exec_body(start)))
    except (OSError, ConnectionError) as err:
        await conn.close()
        raise AgentProtocolError(f"sending the exec request: {err}") from err
    return conn
