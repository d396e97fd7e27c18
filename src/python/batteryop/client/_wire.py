"""The exec stream's two messages on the wire, encoded and decoded here, by hand, so that the
client never imports protobuf's runtime.

The Exec Agent serves flintlock's MicroVMExec unchanged (EA-003). The client sends its
`ExecCommandRequest` (a `start`, `stdin` chunks, `stdin_eof`) and receives its
`ExecCommandResponse` (`stdout`, `stderr`, `error`, and the last message, `exit_code`);
src/protos/battery_protos/flintlock defines both and stays their definition. Importing
protobuf's Python runtime and the generated module took 20-25 ms of every `battery run` (issue
25, item 7; docs/dev/client-performance.md), while decoding here costs about 6 ms per 100 MiB
of output in 32 KiB messages. So this module writes and reads the proto3 wire format of these
two messages only: field numbers and types as the .proto gives them, default values left out
as proto3 does, and, in a response, fields it does not know skipped (a newer agent may send
them) and a truncated or malformed message refused (`ValueError`; the transport then ends the
call and fails the exec).

`wire_test` holds this to the generated code (`microvmexec_pb2`): every request encoded here
parses there to the message the fields make, and every response serialized there (unknown
fields added, or cut short) decodes here to the same payload, or fails in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from batteryop.api.protowire import (
    EGROUP,
    ERROR,
    EXIT_CODE,
    I32,
    I64,
    LEN,
    MALFORMED,
    RESPONSE_FIELDS,
    SGROUP,
    STDERR,
    STDOUT,
    VARINT,
    decode_varint,
    encode_varint,
    tag,
)

if TYPE_CHECKING:
    from batteryop.client._exec import ExecRequest

_MAX_FIELD: Final = (1 << 29) - 1

STDIN_EOF: Final = bytes([tag(3, VARINT), 1])
"""`ExecCommandRequest{stdin_eof: true}`, the last message of a stream with stdin."""

_KINDS: Final = {number: kind for kind, number in RESPONSE_FIELDS.items()}

Response = tuple[str, "bytes | int | str | None"]
"""A decoded `ExecCommandResponse`: which of its `payload` is set (`STDOUT`, `STDERR`,
`EXIT_CODE`, `ERROR`, or "" for none) and its value (bytes, int, str, or None); from
`read_response`, also `MALFORMED` and why."""


def _len_field(number: int, data: bytes) -> bytes:
    return encode_varint(tag(number, LEN)) + encode_varint(len(data)) + data


def _string_field(number: int, text: str) -> bytes:
    return _len_field(number, text.encode("utf-8")) if text else b""


def _int_field(number: int, value: int) -> bytes:
    return encode_varint(tag(number, VARINT)) + encode_varint(value) if value else b""


def encode_start(request: ExecRequest) -> bytes:
    """`ExecCommandRequest{start: ExecStart{...}}` for `request` (ExecStart's fields 1-9: uid,
    cmd, args, cwd, env, shell, user, timeout_seconds, has_stdin)."""
    if not request.argv:
        raise ValueError("a command needs at least the program to run")
    if not -(1 << 31) <= request.timeout_seconds < 1 << 31:
        raise ValueError(f"timeout_seconds {request.timeout_seconds} is not an int32")
    start = b"".join(
        (
            _string_field(1, request.microvm_uid),
            _string_field(2, request.argv[0]),
            *(_len_field(3, arg.encode("utf-8")) for arg in request.argv[1:]),
            _string_field(4, request.cwd),
            *(
                _len_field(5, _string_field(1, key) + _string_field(2, value))
                for key, value in request.env.items()
            ),
            # 6, shell: never set; the client runs argv directly
            _string_field(7, request.user),
            _int_field(8, request.timeout_seconds),
            _int_field(9, int(request.has_stdin)),
        )
    )
    return _len_field(1, start)


def encode_stdin(data: bytes) -> bytes:
    """`ExecCommandRequest{stdin: data}`."""
    return _len_field(2, data)


def _read_tag(data: bytes, at: int) -> tuple[int, int, int]:
    value, at = decode_varint(data, at)
    number, wire = value >> 3, value & 7
    if not 0 < number <= _MAX_FIELD or value > 0xFFFFFFFF:
        raise ValueError(f"invalid field number {number}")
    return number, wire, at


def _skip(data: bytes, at: int, number: int, wire: int, depth: int = 0) -> int:
    """The offset after the value of field `number` (wire type `wire`) at `at`."""
    if wire == VARINT:
        return decode_varint(data, at)[1]
    if wire == I64:
        at += 8
    elif wire == I32:
        at += 4
    elif wire == LEN:
        size, at = decode_varint(data, at)
        at += size
    elif wire == SGROUP:  # proto2 groups may still arrive as unknown fields
        if depth >= 100:
            raise ValueError("groups nested too deep")
        while True:
            inner, inner_wire, at = _read_tag(data, at)
            if inner_wire == EGROUP:
                if inner != number:
                    raise ValueError("unmatched end of group")
                return at
            at = _skip(data, at, inner, inner_wire, depth + 1)
    else:
        raise ValueError(f"wire type {wire} out of place")
    if at > len(data):
        raise ValueError("truncated field")
    return at


def decode_response(data: bytes) -> Response:
    """An `ExecCommandResponse` from its bytes; the last `payload` field on the wire wins, as
    proto3 has it for a oneof. Raises `ValueError` on a malformed message."""
    kind: str = ""
    value: bytes | int | str | None = None
    at, end = 0, len(data)
    while at < end:
        number, wire, at = _read_tag(data, at)
        field = _KINDS.get(number)
        if wire == LEN and field in (STDOUT, STDERR, ERROR):
            size, at = decode_varint(data, at)
            if at + size > end:
                raise ValueError("truncated field")
            chunk = data[at : at + size]
            at += size
            if field == ERROR:
                kind, value = ERROR, chunk.decode("utf-8")  # proto3 strings are UTF-8
            else:
                kind, value = field, chunk
        elif wire == VARINT and field == EXIT_CODE:
            code, at = decode_varint(data, at)
            code &= 0xFFFFFFFF  # int32: the low 32 bits, signed
            kind, value = EXIT_CODE, code - (1 << 32) if code >= 1 << 31 else code
        else:
            at = _skip(data, at, number, wire)
    return kind, value


def read_response(data: bytes) -> Response:
    """`decode_response` as gRPC's deserializer: a malformed message is `(MALFORMED, why)`, not
    an exception, which grpc.aio only logs before handing the caller None."""
    try:
        return decode_response(data)
    except ValueError as e:
        return MALFORMED, str(e)


# -- flintlock's MicroVMSSHProxy (`battery shell`, `battery ssh-proxy`) ------------------------
# `SSHProxyRequest{uid = 1 string | data = 2 bytes}` up, `SSHProxyResponse{data = 1 bytes}` down
# (src/protos/.../microvmsshproxy.proto); `wire_test` holds these to the generated code too.


def encode_ssh_uid(uid: str) -> bytes:
    """`SSHProxyRequest{uid}`, the stream's first message."""
    return _len_field(1, uid.encode("utf-8"))


def encode_ssh_data(data: bytes) -> bytes:
    """`SSHProxyRequest{data}`."""
    return _len_field(2, data)


def decode_ssh_response(data: bytes) -> bytes:
    """`SSHProxyResponse.data` from its bytes (the last on the wire wins; unknown fields are
    skipped). Raises `ValueError` on a malformed message."""
    value = b""
    at, end = 0, len(data)
    while at < end:
        number, wire, at = _read_tag(data, at)
        if number == 1 and wire == LEN:
            size, at = decode_varint(data, at)
            if at + size > end:
                raise ValueError("truncated field")
            value = data[at : at + size]
            at += size
        else:
            at = _skip(data, at, number, wire)
    return value


def read_ssh_response(data: bytes) -> Response:
    """`decode_ssh_response` as gRPC's deserializer: `(STDOUT, data)`, or `(MALFORMED, why)`."""
    try:
        return STDOUT, decode_ssh_response(data)
    except ValueError as e:
        return MALFORMED, str(e)
