"""`_wire` against the generated code of the same .proto: what the client encodes parses there
to the message its fields make; what the agent serializes decodes here to the same payload,
with unknown fields of every wire type skipped, and a message cut short fails in both."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2 as pb
from batteryop.api.protowire import encode_varint
from batteryop.client import _wire
from batteryop.client._exec import ExecRequest
from batteryop.client.cli_test import python

PROPERTY = settings(derandomize=True, deadline=None, max_examples=300)

text = st.text(max_size=20)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)


@st.composite
def requests(draw: st.DrawFn) -> ExecRequest:
    return ExecRequest(
        microvm_uid=draw(text),
        argv=tuple(draw(st.lists(text, min_size=1, max_size=4))),
        env=draw(st.dictionaries(text, text, max_size=3)),
        cwd=draw(text),
        user=draw(text),
        timeout_seconds=draw(int32),
        has_stdin=draw(st.booleans()),
    )


@PROPERTY
@given(requests())
@example(ExecRequest(microvm_uid="", argv=("",)))
@example(ExecRequest(microvm_uid="01UID", argv=("true",), env={"": ""}, timeout_seconds=-1))
def test_a_start_parses_in_the_generated_code_as_the_message_its_fields_make(
    request: ExecRequest,
) -> None:
    expected = pb.ExecCommandRequest(
        start=pb.ExecStart(
            uid=request.microvm_uid,
            cmd=request.argv[0],
            args=list(request.argv[1:]),
            cwd=request.cwd,
            env=dict(request.env),
            user=request.user,
            timeout_seconds=request.timeout_seconds,
            has_stdin=request.has_stdin,
        )
    )
    parsed = pb.ExecCommandRequest.FromString(_wire.encode_start(request))
    assert parsed == expected
    assert parsed.WhichOneof("payload") == "start"


def test_a_start_without_a_program_or_with_a_timeout_past_int32_is_refused() -> None:
    with pytest.raises(ValueError, match="at least the program"):
        _wire.encode_start(ExecRequest(microvm_uid="u", argv=()))
    with pytest.raises(ValueError, match="timeout_seconds 2147483648 is not an int32"):
        _wire.encode_start(ExecRequest(microvm_uid="u", argv=("x",), timeout_seconds=1 << 31))


@PROPERTY
@given(st.binary(max_size=300))
@example(b"")
def test_stdin_and_its_end_parse_in_the_generated_code(data: bytes) -> None:
    stdin = pb.ExecCommandRequest.FromString(_wire.encode_stdin(data))
    assert stdin.WhichOneof("payload") == "stdin"
    assert stdin.stdin == data
    eof = pb.ExecCommandRequest.FromString(_wire.STDIN_EOF)
    assert eof.WhichOneof("payload") == "stdin_eof"
    assert eof.stdin_eof is True


responses = st.one_of(
    st.builds(lambda b: pb.ExecCommandResponse(stdout=b), st.binary(max_size=200)),
    st.builds(lambda b: pb.ExecCommandResponse(stderr=b), st.binary(max_size=200)),
    st.builds(lambda c: pb.ExecCommandResponse(exit_code=c), int32),
    st.builds(lambda t: pb.ExecCommandResponse(error=t), text),
    st.just(pb.ExecCommandResponse()),
)


# The unknown fields' tags and lengths are written with the varint `_wire` uses: the requests
# above hold it to the generated code.
_varint = encode_varint


@st.composite
def unknown_fields(draw: st.DrawFn) -> bytes:
    """Fields the client does not know (numbers 5 and up, or a known number with another wire
    type), of every wire type, groups included: what a newer agent may add."""
    number = draw(st.one_of(st.integers(5, (1 << 29) - 1), st.integers(1, 4)))
    wire = draw(st.sampled_from([0, 1, 2, 3, 5]))
    if number <= 4 and wire == {1: 2, 2: 2, 3: 0, 4: 2}[number]:
        wire = 5  # not the field's own wire type, so unknown to both decoders
    tag = _varint(number << 3 | wire)
    if wire == 0:
        return tag + _varint(draw(st.integers(0, (1 << 64) - 1)))
    if wire == 1:
        return tag + draw(st.binary(min_size=8, max_size=8))
    if wire == 5:
        return tag + draw(st.binary(min_size=4, max_size=4))
    if wire == 2:
        body = draw(st.binary(max_size=40))
        return tag + _varint(len(body)) + body
    inner = b"".join(draw(st.lists(unknown_fields(), max_size=2)))
    return tag + inner + _varint(number << 3 | 4)


def assert_same(data: bytes) -> None:
    """`_wire.decode_response` and the generated code agree on `data`, or both refuse it."""
    try:
        message = pb.ExecCommandResponse.FromString(data)
    except DecodeError:
        with pytest.raises(ValueError):
            _wire.decode_response(data)
        return
    kind = message.WhichOneof("payload") or ""
    assert _wire.decode_response(data) == (kind, getattr(message, kind) if kind else None)


@PROPERTY
@given(st.lists(st.one_of(responses.map(lambda m: m.SerializeToString()), unknown_fields())))
def test_a_response_decodes_as_the_generated_code_decodes_it(parts: list[bytes]) -> None:
    """Several payloads in one message (the last wins) and unknown fields among them."""
    assert_same(b"".join(parts))


@PROPERTY
@given(st.lists(st.one_of(responses.map(lambda m: m.SerializeToString()), unknown_fields())))
def test_a_response_cut_short_fails_as_in_the_generated_code(parts: list[bytes]) -> None:
    data = b"".join(parts)
    for cut in range(len(data)):
        assert_same(data[:cut])


@pytest.mark.parametrize(
    "data",
    [
        b"\x08\x01",  # field 1 as a varint: not stdout's wire type, skipped
        b"\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # exit_code -1, ten bytes
        b"\x18\x80\x80\x80\x80\x10",  # exit_code 2^32: its low 32 bits, 0
        b"\x22\x02\xc3\x28",  # error that is not UTF-8
        b"\x1c",  # an end of group with no start
        b"\x1b\x24",  # a group ended by another field's end
        b"\x00\x01",  # field number 0
        b"\x0e",  # wire type 6
        b"\x18" + b"\x80" * 10 + b"\x01",  # an eleven-byte varint
    ],
)
def test_edge_cases_decode_as_in_the_generated_code(data: bytes) -> None:
    assert_same(data)


def test_the_command_s_client_never_imports_protobuf() -> None:
    """What `battery run` and `battery exec` load to run a command: the transport and the
    client, not protobuf's runtime (20-25 ms of every command's start)."""
    probe = (
        "import sys\n"
        "import batteryop.client.cli, batteryop.client._sync, batteryop.client._transport\n"
        "print('grpc' in sys.modules, [m for m in sys.modules if m.startswith('google')])\n"
    )
    done = python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True []"]


def test_as_grpc_s_deserializer_a_malformed_answer_is_named_not_raised() -> None:
    assert _wire.read_response(b"\x0a\x05ab") == (_wire.MALFORMED, "truncated field")
    assert _wire.read_response(b"\x18\x07") == (_wire.EXIT_CODE, 7)


# -- MicroVMSSHProxy's two messages -------------------------------------------------------


@PROPERTY
@given(st.text(max_size=40), st.binary(max_size=200))
def test_ssh_requests_parse_in_the_generated_code(uid: str, data: bytes) -> None:
    from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2

    first = microvmsshproxy_pb2.SSHProxyRequest.FromString(_wire.encode_ssh_uid(uid))
    assert first.uid == uid
    assert first.WhichOneof("payload") == "uid"  # set, even when empty (a oneof's field)
    later = microvmsshproxy_pb2.SSHProxyRequest.FromString(_wire.encode_ssh_data(data))
    assert later.data == data


@PROPERTY
@given(st.binary(max_size=200), st.integers(min_value=2, max_value=1000), st.binary(max_size=20))
def test_ssh_responses_decode_as_the_generated_code_serializes_them(
    data: bytes, unknown: int, extra: bytes
) -> None:
    from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2

    wire = microvmsshproxy_pb2.SSHProxyResponse(data=data).SerializeToString()
    # An unknown length-delimited field, as a newer flintlockd might add.
    wire += encode_varint(unknown << 3 | 2) + encode_varint(len(extra)) + extra
    assert _wire.read_ssh_response(wire) == (_wire.STDOUT, data)
    cut = microvmsshproxy_pb2.SSHProxyResponse(data=data + b"x").SerializeToString()[:-1]
    assert _wire.read_ssh_response(cut)[0] == _wire.MALFORMED
    with pytest.raises(DecodeError):
        microvmsshproxy_pb2.SSHProxyResponse.FromString(cut)
