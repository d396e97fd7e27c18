"""The exec API the agent serves: flintlock's `MicroVMExec` and `MicroVMSSHProxy`, and
`ServerInfo` and `GetMicroVM` of flintlock's `MicroVM` (EA-003, EA-130). A client that speaks
flintlockd's exec or SSH proxy API works unchanged, plus a bearer token.

- `ExecCommand`: `relay.ExecRelay` (authorization, then the relay). Its requests are decoded
  here (`decode_request`), so a message that does not decode reaches the relay as None and is
  refused with INVALID_ARGUMENT by name instead of failing inside gRPC.
- `SSHProxy`: `ssh_relay.SSHProxyRelay`, the same way.
- `ServerInfo`: authenticated callers only (steps 1-2 of `auth`); answers what this Host's
  flintlockd answers.
- `GetMicroVM`: authorized for the requested uid (all of `auth`), then flintlockd's answer.
- Every other `MicroVM` method: UNIMPLEMENTED. The agent creates and deletes nothing.

A refusal (`RefusedError`) becomes the call's status here and nowhere else, is logged with
the check, the code and the caller's user where known (never the token), and is counted by
check and code (`RefusalObserver`, the metric `exec_agent_refusals_total`). Logs of refusals
by `limit` and `bearer token` are at debug level: a flood of bad calls must not flood the log.

Every authenticated call, answered or refused, spends its identity's bucket of calls (`auth`,
EA-120); `ExecCommand` is turned away by address and by a known token's identity before its
start is read (EA-105, EA-121).

Requirements: EA-003; EA-010..EA-014, EA-120, EA-121 (through `auth`); EA-020, EA-021 (through
`relay`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import Final, NoReturn, Protocol, TypeVar

import grpc
import grpc.aio
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.exec_agent import ssh_relay
from batteryop.exec_agent.auth import Authorizer
from batteryop.exec_agent.errors import Check, RefusalObserver, RefusedError
from batteryop.exec_agent.flintlockd import EXEC_SERVICE, SSH_PROXY_SERVICE, Flintlockd
from batteryop.exec_agent.relay import ExecRelay, flintlockd_failure
from batteryop.exec_agent.ssh_relay import SSHProxyRelay

log = logging.getLogger(__name__)

MICROVM_SERVICE: Final = microvms_pb2.DESCRIPTOR.services_by_name["MicroVM"].full_name
"""`microvm.services.api.v1alpha1.MicroVM`."""

MSG_UNIMPLEMENTED: Final = "the Exec Agent serves only ServerInfo and GetMicroVM of this service"


def decode_request(data: bytes) -> microvmexec_pb2.ExecCommandRequest | None:
    """An ExecCommandRequest from the wire, or None when the bytes are not one."""
    try:
        return microvmexec_pb2.ExecCommandRequest.FromString(data)
    except DecodeError:
        return None


Q = TypeVar("Q", contravariant=True)
"""A relay's request message."""
A = TypeVar("A", covariant=True)
"""A relay's answer."""

QUIET_CHECKS: Final = frozenset({Check.LIMIT, Check.BEARER_TOKEN})
"""Refusals logged at debug level only: what a flood of bad calls is refused by."""


async def refuse(
    context: grpc.aio.ServicerContext,
    error: RefusedError,
    method: str,
    refusals: RefusalObserver | None = None,
) -> NoReturn:
    """End the call with the refusal's status, after logging and counting which check failed."""
    if refusals is not None:
        refusals.observe_refusal(error.check, error.code)
    log.log(
        logging.DEBUG if error.check in QUIET_CHECKS else logging.INFO,
        "Refused %s",
        method,
        extra={"check": str(error.check), "code": error.code.name, "detail": error.detail},
    )
    await context.abort(error.code, error.message)
    raise AssertionError("context.abort returned")


class _Relay(Protocol[Q, A]):
    async def turn_away(
        self, peer: str | None, metadata: Iterable[tuple[str, str | bytes]] | None = None
    ) -> RefusedError | None: ...

    def run(
        self,
        requests: AsyncIterator[Q | None],
        metadata: Iterable[tuple[str, str | bytes]] | None,
        peer: str | None = None,
    ) -> AsyncIterator[A]: ...


async def relayed(
    relay: _Relay[Q, A],
    requests: AsyncIterator[Q | None],
    context: grpc.aio.ServicerContext,
    method: str,
    refusals: RefusalObserver | None,
) -> AsyncIterator[A]:
    """One call relayed: turned away by address or identity before its first message is read
    (EA-105, EA-121: no task, no read, no review), then the relay's answers; a refusal becomes
    the call's status (`refuse`)."""
    limited = await relay.turn_away(context.peer(), context.invocation_metadata())
    if limited is not None:
        await refuse(context, limited, method, refusals)
    try:
        async for response in relay.run(requests, context.invocation_metadata(), context.peer()):
            yield response
    except RefusedError as e:
        await refuse(context, e, method, refusals)


class ExecServicer:
    """`MicroVMExec.ExecCommand` over `ExecRelay`."""

    def __init__(self, relay: ExecRelay, refusals: RefusalObserver | None = None) -> None:
        self._relay = relay
        self._refusals = refusals

    async def ExecCommand(
        self,
        request_iterator: AsyncIterator[microvmexec_pb2.ExecCommandRequest | None],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        async for response in relayed(
            self._relay, request_iterator, context, "ExecCommand", self._refusals
        ):
            yield response

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's handler, decoding requests with `decode_request`; the responses are
        the relay's bytes (`frames`), sent as they are."""
        method = grpc.stream_stream_rpc_method_handler(
            self.ExecCommand, request_deserializer=decode_request
        )
        return grpc.method_handlers_generic_handler(EXEC_SERVICE, {"ExecCommand": method})


class SSHProxyServicer:
    """`MicroVMSSHProxy.SSHProxy` over `ssh_relay.SSHProxyRelay` (EA-130): turned away, refused
    and counted as `ExecCommand` is."""

    def __init__(self, relay: SSHProxyRelay, refusals: RefusalObserver | None = None) -> None:
        self._relay = relay
        self._refusals = refusals

    async def SSHProxy(
        self,
        request_iterator: AsyncIterator[ssh_relay.Request | None],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[ssh_relay.Response]:
        async for response in relayed(
            self._relay, request_iterator, context, "SSHProxy", self._refusals
        ):
            yield response

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's handler, decoding requests with `ssh_relay.decode_request`."""
        method = grpc.stream_stream_rpc_method_handler(
            self.SSHProxy,
            request_deserializer=ssh_relay.decode_request,
            response_serializer=ssh_relay.Response.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SSH_PROXY_SERVICE, {"SSHProxy": method})


class MicroVMServicer(microvms_pb2_grpc.MicroVMServicer):
    """`ServerInfo` and `GetMicroVM`, authorized, answered by this Host's flintlockd."""

    def __init__(
        self,
        authorizer: Authorizer,
        flintlockd: Flintlockd,
        refusals: RefusalObserver | None = None,
    ) -> None:
        self._authorizer = authorizer
        self._flintlockd = flintlockd
        self._refusals = refusals

    async def ServerInfo(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.ServerInfoResponse:
        try:
            await self._authorizer.authenticate(context.invocation_metadata(), peer=context.peer())
            try:
                return await self._flintlockd.server_info()
            except grpc.aio.AioRpcError as e:
                raise flintlockd_failure(e.code(), e.details(), "ServerInfo") from None
        except RefusedError as e:
            await refuse(context, e, "ServerInfo", self._refusals)

    async def GetMicroVM(
        self, request: microvms_pb2.GetMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.GetMicroVMResponse:
        try:
            caller = await self._authorizer.authenticate(
                context.invocation_metadata(), read_claim=True, peer=context.peer()
            )
            await self._authorizer.authorize(caller, request.uid)
            try:
                return await self._flintlockd.get_microvm(request.uid)
            except grpc.aio.AioRpcError as e:
                raise flintlockd_failure(e.code(), e.details(), "GetMicroVM") from None
        except RefusedError as e:
            await refuse(context, e, "GetMicroVM", self._refusals)

    async def CreateMicroVM(
        self, request: microvms_pb2.CreateMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.CreateMicroVMResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, MSG_UNIMPLEMENTED)
        raise AssertionError("context.abort returned")

    async def DeleteMicroVM(
        self, request: microvms_pb2.DeleteMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, MSG_UNIMPLEMENTED)
        raise AssertionError("context.abort returned")

    async def ListMicroVMs(
        self, request: microvms_pb2.ListMicroVMsRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.ListMicroVMsResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, MSG_UNIMPLEMENTED)
        raise AssertionError("context.abort returned")

    async def ListMicroVMsStream(
        self, request: microvms_pb2.ListMicroVMsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[microvms_pb2.ListMessage]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, MSG_UNIMPLEMENTED)
        yield microvms_pb2.ListMessage()  # unreachable; makes this an async generator
