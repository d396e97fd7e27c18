"""`MockExecTransport`, the public test double: it answers as the handler says, delivers the
output to the same sinks the real transport does, records each call, and lets a handler's
error through as the exec's error."""

from __future__ import annotations

import pytest

from batteryop.client import (
    ExecCall,
    ExecPermissionError,
    ExecRequest,
    ExecResult,
    ExecUnavailableError,
    MockExecTransport,
)
from batteryop.client._exec import bytes_source

REQUEST = ExecRequest(microvm_uid="vm-1", argv=("cat", "-n"), env={"A": "1"}, has_stdin=True)


async def run(
    transport: MockExecTransport, request: ExecRequest = REQUEST, stdin: bytes | None = b"hi\n"
) -> tuple[int, bytes, bytes, list[str]]:
    out: list[bytes] = []
    err: list[bytes] = []
    errors: list[str] = []

    async def async_sink(data: bytes) -> None:  # sinks may be plain or async functions
        err.append(data)

    code = await transport.run(
        "10.0.0.5:10270",
        "token-1",
        request,
        stdin=None if stdin is None else bytes_source(stdin),
        stdout=out.append,
        stderr=async_sink,
        errors=errors.append,
    )
    return code, b"".join(out), b"".join(err), errors


@pytest.mark.req("CC-110")
async def test_a_plain_handler_answers_and_sees_the_whole_call() -> None:
    transport = MockExecTransport(lambda call: ExecResult(3, b"1\thi\n", b"warn\n", ("note",)))
    assert await run(transport) == (3, b"1\thi\n", b"warn\n", ["note"])
    assert transport.calls == [ExecCall("10.0.0.5:10270", "token-1", REQUEST, b"hi\n")]


async def test_an_async_handler_is_awaited() -> None:
    async def handler(call: ExecCall) -> ExecResult:
        return ExecResult(0, stdout=call.stdin.upper())

    assert await run(MockExecTransport(handler)) == (0, b"HI\n", b"", [])


async def test_a_handlers_error_is_the_execs_error_and_the_call_is_still_recorded() -> None:
    def refuse(call: ExecCall) -> ExecResult:
        raise ExecPermissionError("token is not bound to this claim's Secret")

    transport = MockExecTransport(refuse)
    with pytest.raises(ExecPermissionError, match="not bound"):
        await run(transport, stdin=None)
    assert [c.stdin for c in transport.calls] == [b""]


async def test_a_request_without_a_program_is_refused_as_the_real_transport_refuses_it() -> None:
    transport = MockExecTransport(lambda call: ExecResult(0))
    with pytest.raises(ValueError, match="at least the program"):
        await run(transport, ExecRequest(microvm_uid="vm-1", argv=()))
    assert transport.calls == []


async def test_a_closed_transport_runs_nothing() -> None:
    transport = MockExecTransport(lambda call: ExecResult(0))
    await transport.aclose()
    with pytest.raises(ExecUnavailableError, match="closed"):
        await run(transport)
