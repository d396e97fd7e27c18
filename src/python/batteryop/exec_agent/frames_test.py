"""flintlockd's messages as the relay carries them (`frames`), held to the generated code of
the same .proto: an output message is read no further than its length prefix and passed on as
the very bytes that came; every other message is decoded by the generated code and passed on
unchanged; a joined message decodes there to the outputs in order; and a message that does not
decode ends the stream with UNAVAILABLE instead of reaching the caller."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import grpc
import grpc.aio
import pytest
from google.protobuf.message import DecodeError

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api.protowire import encode_varint
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.exec_agent.frames import (
    EXIT_CODE,
    MALFORMED,
    STDERR,
    STDOUT,
    Frame,
    joined_output,
    read_frame,
)
from batteryop.exec_agent.relay import Outbox, _from_flintlockd

Response = microvmexec_pb2.ExecCommandResponse


def output(kind: str, data: bytes) -> Response:
    return Response(stdout=data) if kind == STDOUT else Response(stderr=data)


SIZES = [0, 1, 127, 128, 16383, 16384, 32 * 1024, 1024 * 1024]
"""Output sizes whose length prefix is one to three bytes long, either side of each step."""


@pytest.mark.req("EA-020")
@pytest.mark.parametrize("kind", [STDOUT, STDERR])
@pytest.mark.parametrize("size", SIZES)
def test_an_output_message_is_a_view_of_the_bytes_that_came(kind: str, size: int) -> None:
    data = output(kind, bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    wire = data.SerializeToString()
    frame = read_frame(wire)
    assert frame.kind == kind
    assert frame.wire is wire  # passed on as it came
    assert isinstance(frame.output, memoryview)  # not copied
    assert bytes(frame.output) == getattr(data, kind)
    assert frame.size == size


def unknown_field() -> bytes:
    """Field 15, length-delimited: one a newer flintlockd might send."""
    return encode_varint(15 << 3 | 2) + encode_varint(3) + b"new"


@pytest.mark.req("EA-020")
@pytest.mark.parametrize(
    "wire",
    [
        Response(exit_code=0).SerializeToString(),
        Response(exit_code=-1).SerializeToString(),
        Response(error="starting command: no such file").SerializeToString(),
        b"",  # no payload at all
        Response(stdout=b"out").SerializeToString() + unknown_field(),
        unknown_field() + Response(stderr=b"err").SerializeToString(),
        # Two payloads: the last one on the wire wins, as proto3 has it for a oneof.
        Response(stdout=b"first").SerializeToString()
        + Response(stdout=b"last").SerializeToString(),
        Response(stdout=b"out").SerializeToString() + Response(exit_code=3).SerializeToString(),
    ],
    ids=[
        "exit-0",
        "exit-minus-1",
        "error",
        "empty",
        "unknown-after",
        "unknown-before",
        "two-stdout",
        "stdout-then-exit",
    ],
)
def test_any_other_message_is_decoded_by_the_generated_code_and_passed_on_unchanged(
    wire: bytes,
) -> None:
    message = Response.FromString(wire)
    frame = read_frame(wire)
    kind = message.WhichOneof("payload") or ""
    assert frame.kind == kind
    assert frame.wire is wire
    if kind in (STDOUT, STDERR):
        assert bytes(frame.output) == getattr(message, kind)
        assert frame.size == len(getattr(message, kind))
    else:
        assert frame.size == 0


@pytest.mark.req("EA-020", "EA-101")
@pytest.mark.parametrize(
    "wire",
    [
        b"\x0a\x05ab",  # stdout cut short
        b"\x0a\x80",  # its length prefix cut short
        b"\x0a" + b"\xff" * 11,  # a length prefix longer than a varint may be
        b"\x18",  # an exit code with no value
    ],
    ids=["cut-output", "cut-prefix", "long-prefix", "cut-exit-code"],
)
def test_a_message_that_does_not_decode_is_malformed(wire: bytes) -> None:
    with pytest.raises(DecodeError):  # the generated code refuses it too
        Response.FromString(wire)
    frame = read_frame(wire)
    assert frame.kind == MALFORMED
    assert frame.detail


@pytest.mark.req("EA-020")
@pytest.mark.parametrize("kind", [STDOUT, STDERR])
def test_joined_output_decodes_to_the_outputs_in_order(kind: str) -> None:
    parts = [
        read_frame(output(kind, fill * size).SerializeToString())
        for fill, size in ((b"a", 32 * 1024), (b"b", 1), (b"c", 0), (b"d", 200))
    ]
    size = sum(part.size for part in parts)
    joined = joined_output(kind, [part.output for part in parts], size)
    message = Response.FromString(joined.wire)
    assert message.WhichOneof("payload") == kind
    assert getattr(message, kind) == b"a" * 32 * 1024 + b"b" + b"d" * 200
    assert (joined.kind, joined.size) == (kind, size)


class Upstream:
    """flintlockd's side of an exec call as `_from_flintlockd` reads it: these frames, then the
    end of the stream."""

    def __init__(self, wires: Iterable[bytes]) -> None:
        self._frames = [read_frame(wire) for wire in wires]

    async def read(self) -> Frame | object:
        return self._frames.pop(0) if self._frames else grpc.aio.EOF


@pytest.mark.req("EA-020", "EA-101")
async def test_a_malformed_message_from_flintlockd_ends_the_stream_unavailable() -> None:
    outbox: Outbox[Frame] = Outbox(1024 * 1024)
    upstream = Upstream([Response(stdout=b"ok").SerializeToString(), b"\x0a\x05ab"])
    await asyncio.wait_for(_from_flintlockd(upstream, outbox), 10)  # type: ignore[arg-type]
    first = outbox.get_nowait()
    assert isinstance(first, Frame) and bytes(first.output) == b"ok"
    ending = outbox.get_nowait()
    assert isinstance(ending, RefusedError)
    assert ending.code == grpc.StatusCode.UNAVAILABLE
    assert ending.check == Check.FLINTLOCKD
    assert "not an ExecCommandResponse" in ending.message
    assert outbox.empty()  # nothing of it, nor after it, goes to the caller


@pytest.mark.req("EA-020")
async def test_an_exit_code_ends_the_reading() -> None:
    outbox: Outbox[Frame] = Outbox(1024 * 1024)
    exit_wire = Response(exit_code=0).SerializeToString()
    upstream = Upstream([exit_wire, Response(stdout=b"late").SerializeToString()])
    await asyncio.wait_for(_from_flintlockd(upstream, outbox), 10)  # type: ignore[arg-type]
    only = outbox.get_nowait()
    assert isinstance(only, Frame) and only.kind == EXIT_CODE and only.wire is exit_wire
    assert outbox.empty()
