"""The protobuf wire format as two places write and read it by hand: its wire types, tags and
varints, and the `payload` fields of the exec stream's `ExecCommandResponse`.

The client encodes and decodes its exec stream without protobuf's runtime
(`batteryop.client._wire`), and the Exec Agent relays flintlockd's output messages as the
bytes they came in, reading only their length prefix and writing the prefix of the messages it
joins (`batteryop.exec_agent.frames`). Both hold to the generated code of the same .proto in
their tests (src/protos/battery_protos/flintlock stays the messages' definition).
"""

from __future__ import annotations

from typing import Final

UINT64: Final = (1 << 64) - 1

# Wire types: the low three bits of a field's tag.
VARINT: Final = 0
I64: Final = 1
LEN: Final = 2
SGROUP: Final = 3
EGROUP: Final = 4
I32: Final = 5

# ExecCommandResponse's `payload`: its fields' names (as `WhichOneof` gives them) and numbers.
STDOUT: Final = "stdout"
STDERR: Final = "stderr"
EXIT_CODE: Final = "exit_code"
ERROR: Final = "error"
RESPONSE_FIELDS: Final = {STDOUT: 1, STDERR: 2, EXIT_CODE: 3, ERROR: 4}
MALFORMED: Final = "malformed"
"""The kind both readers give a response that does not decode."""


def tag(number: int, wire_type: int) -> int:
    """The tag of field `number` with `wire_type`, the varint before its value."""
    return number << 3 | wire_type


def encode_varint(value: int) -> bytes:
    """`value` as a varint; a negative one as its 64-bit two's complement (10 bytes), as protobuf
    sends a negative int32 or int64."""
    value &= UINT64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    """The varint at `data[at:]` (as an unsigned 64-bit value) and the offset after it;
    `ValueError` when it is cut short or longer than 10 bytes."""
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        if shift >= 64:
            raise ValueError("varint longer than 10 bytes")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value & UINT64, at
