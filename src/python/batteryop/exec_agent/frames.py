"""flintlockd's `ExecCommandResponse` messages as the relay carries them: the bytes that came on
the wire, with what the relay needs to know of them (EA-020).

The relay passes each message on to the caller as flintlockd sent it, or joins output messages
that follow back to back into one (`relay._coalesce`). Neither needs the message decoded: a
message that is only a `stdout` or `stderr` field, as flintlockd's output messages are, is read
no further than its length prefix, and its bytes are a view into the message (no copy); a
joined message is written as its field's prefix and the views, in one copy. Every other message
(the exit code, an error, a message with fields this agent does not know, or several) is
decoded by the generated code, and still passed on as the bytes that came. So the agent spends
no work per message on what it does not look at: with 32 KiB output messages (flintlock's read
size), decoding each into a protobuf object and serializing the joined ones again cost about a
fifth of the agent's CPU per MiB of output (docs/dev/client-performance.md).

`read_frame` is the deserializer of the agent's `ExecCommand` calls to flintlockd; a message
that does not decode is a `Frame` of kind `MALFORMED`, which the relay ends the stream on.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.message import DecodeError

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api.protowire import (
    EXIT_CODE,
    LEN,
    MALFORMED,
    RESPONSE_FIELDS,
    STDERR,
    STDOUT,
    decode_varint,
    encode_varint,
    tag,
)

__all__ = ["EXIT_CODE", "MALFORMED", "STDERR", "STDOUT", "Frame", "joined_output", "read_frame"]

_TAGS: Final = {kind: bytes([tag(RESPONSE_FIELDS[kind], LEN)]) for kind in (STDOUT, STDERR)}
"""The one-byte tag an output message starts with, by its kind."""
_KINDS: Final = {tag[0]: kind for kind, tag in _TAGS.items()}

Output = bytes | memoryview


class Frame:
    """One `ExecCommandResponse`: `wire`, its bytes, and its `kind` (the `payload` field set:
    `STDOUT`, `STDERR`, `EXIT_CODE`, "error", "" for none, or `MALFORMED`); for output, `output`
    is its bytes and `size` their length (0 for any other kind); for `MALFORMED`, `detail` says
    why."""

    __slots__ = ("kind", "output", "size", "wire", "detail")

    def __init__(self, kind: str, wire: bytes, output: Output = b"", *, detail: str = "") -> None:
        self.kind = kind
        self.wire = wire
        self.output = output
        self.size = len(output)
        self.detail = detail

    def __repr__(self) -> str:
        return f"Frame({self.kind}, {len(self.wire)} bytes)"


def read_frame(data: bytes) -> Frame:
    """The frame of the message `data`, as flintlockd sent it."""
    kind = _KINDS.get(data[0]) if data else None
    if kind is not None:
        try:
            size, at = decode_varint(data, 1)
        except ValueError:
            pass  # the generated code decides below
        else:
            if at + size == len(data):  # the one field, nothing after it
                return Frame(kind, data, memoryview(data)[at:])
    try:
        message = microvmexec_pb2.ExecCommandResponse.FromString(data)
    except DecodeError as e:
        return Frame(MALFORMED, data, detail=str(e) or "it does not decode")
    kind = message.WhichOneof("payload") or ""
    if kind in _TAGS:
        return Frame(kind, data, getattr(message, kind))
    return Frame(kind, data)


def joined_output(kind: str, outputs: list[Output], size: int) -> Frame:
    """One `stdout` or `stderr` message of `outputs` (`size` bytes in all), in order."""
    wire = b"".join([_TAGS[kind], encode_varint(size), *outputs])
    return Frame(kind, wire, memoryview(wire)[len(wire) - size :])
