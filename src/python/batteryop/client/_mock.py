"""`MockExecTransport` (CC-110): the public test double for exec, so consumers test their own code
without an Exec Agent, a Host or a MicroVM.

It stands where `GrpcExecTransport` stands (an `ExecTransport`, the one seam between a claim
and the network) and answers every exec with a function the test gives, plain or async:

    def handler(call: ExecCall) -> ExecResult:
        if call.request.argv[0] == "uname":
            return ExecResult(0, stdout=b"Linux\\n")
        return ExecResult(127, errors=("command not found",))

    async with AsyncClient(namespace="ci", exec_transport=MockExecTransport(handler)) as c:
        async with await c.claim("runners", "runner") as claim:
            assert (await claim.exec(["uname"])).stdout == b"Linux\\n"

Everything but the command runs for real: the claim is made, bound, renewed and released
against the API server, and the call carries the claim's MicroVM uid, its agent address and
a fresh bound token (`ExecCall`), so a test can assert on them. A handler that raises one of
the client's errors (`ExecPermissionError`, `ExecUnavailableError`) makes the exec fail as
the real transport would. `calls` records every exec in order.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass

from batteryop.client._exceptions import ExecUnavailableError
from batteryop.client._exec import ExecRequest, OutputSink, deliver
from batteryop.client._models import ExecResult


@dataclass(frozen=True)
class ExecCall:
    """One exec as the transport received it: where, with which token, what, and the whole
    stdin the caller sent (empty without stdin)."""

    address: str
    token: str
    request: ExecRequest
    stdin: bytes = b""


ExecHandler = Callable[[ExecCall], "ExecResult | Awaitable[ExecResult]"]
"""Answers one exec: the exit code, the output and the agent's error messages to deliver."""


class MockExecTransport:
    """An `ExecTransport` whose execs are answered by `handler` instead of a MicroVM."""

    def __init__(self, handler: ExecHandler) -> None:
        self._handler = handler
        self.calls: list[ExecCall] = []
        self.closed = False

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
    ) -> int:
        if self.closed:
            raise ExecUnavailableError("the exec transport is closed")
        request.start_message()  # the same check of the request the real transport makes
        data = b"".join([chunk async for chunk in stdin]) if stdin is not None else b""
        call = ExecCall(address, token, request, data)
        self.calls.append(call)
        answer = self._handler(call)
        result = await answer if inspect.isawaitable(answer) else answer
        if result.stdout:
            await deliver(stdout, result.stdout)
        if result.stderr:
            await deliver(stderr, result.stderr)
        for message in result.errors:
            errors(message)
        return result.exit_code

    async def aclose(self) -> None:
        self.closed = True
