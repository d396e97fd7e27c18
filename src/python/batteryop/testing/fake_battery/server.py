"""The fake battery's gRPC server: its services, health, basic auth and durable answers.

`Server` serves PoolAdmin, Lease, Events, HostAdmin (`services.py`) and grpc.health.v1 (""
SERVING, BA-112) for one FakeBattery, and can stop listening and listen again on the same port
(TD-006). Its interceptor refuses every call while the `unavailable` fault is on, checks basic
auth, and with a database makes each handler's changes durable before its answer leaves
(BA-060).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from base64 import b64encode
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from battery_protos.poolmgr.v1alpha1 import (
    events_pb2_grpc,
    hostadmin_pb2_grpc,
    lease_pb2_grpc,
    pooladmin_pb2_grpc,
)
from batteryop.testing.fake_battery.services import (
    EventsService,
    HostAdminService,
    LeaseService,
    PoolAdminService,
)
from batteryop.testing.fake_battery.snapshot import DatabaseError

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery

log = logging.getLogger(__name__)


class ListenError(Exception):
    """The server could not listen on its address."""

    def __init__(self, address: str) -> None:
        super().__init__(f"cannot listen on {address}")
        self.address = address


class Server:
    """One FakeBattery's gRPC server; `port` stays the same across stop() and start()."""

    def __init__(self, battery: FakeBattery, address: str) -> None:
        self._battery = battery
        self.address = address
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def target(self) -> str:
        host = self.address.rsplit(":", 1)[0]
        if host in ("", "0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> None:
        """Listen (on the port of the last start, if any) and serve; ListenError if it cannot."""
        battery = self._battery
        server = grpc.aio.server(interceptors=[_Interceptor(battery)])
        pooladmin_pb2_grpc.add_PoolAdminServicer_to_server(PoolAdminService(battery), server)
        lease_pb2_grpc.add_LeaseServicer_to_server(LeaseService(battery), server)
        events_pb2_grpc.add_EventsServicer_to_server(EventsService(battery), server)
        hostadmin_pb2_grpc.add_HostAdminServicer_to_server(HostAdminService(battery), server)
        self._health = health.aio.HealthServicer()
        # BA-112: the empty service name reports SERVING while battery is up.
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        address = self.address
        if self.port:
            address = f"{address.rsplit(':', 1)[0]}:{self.port}"
        port = server.add_insecure_port(address)
        if port == 0:
            raise ListenError(address)
        await server.start()
        self.port = port
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            if self._health is not None:
                await self._health.enter_graceful_shutdown()
            await server.stop(grace=None)


class _Interceptor(grpc.aio.ServerInterceptor):
    """Basic auth (when configured) and the `unavailable` fault, before any handler runs; with a
    database, the store's write after the handler and before each streamed message (BA-060)."""

    def __init__(self, battery: FakeBattery) -> None:
        self._battery = battery

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        battery = self._battery
        if handler is None:
            return handler
        if battery.faults.unavailable:
            return _refusing(handler, grpc.StatusCode.UNAVAILABLE, "battery unavailable (fault)")
        token = battery.basic_auth_token
        if token:
            expected = "basic " + b64encode(token.encode()).decode()
            metadata = dict(handler_call_details.invocation_metadata or ())
            got = str(metadata.get("authorization", ""))
            if not hmac.compare_digest(got.encode(), expected.encode()):
                return _refusing(handler, grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")
        if battery.store.durable:
            return _flushing(handler, battery)
        return handler


async def _synced_or_abort(battery: FakeBattery, context: grpc.aio.ServicerContext) -> None:
    try:
        await battery.store.synced()
    except DatabaseError as err:
        # As a failed COMMIT fails poolmgrd's RPC: the caller is not told of a change not kept.
        log.error("%s", err)
        await context.abort(grpc.StatusCode.INTERNAL, f"store: {err}")


def _flushing(handler: grpc.RpcMethodHandler, battery: FakeBattery) -> grpc.RpcMethodHandler:
    """handler, with what it changed made durable before its answer (or each message) leaves.

    BA-060, CL-061: a ClaimVM's Lease is in the database before its answer is sent.
    """
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                reply = await inner(request, context)
            except Exception:
                # An abort after a change (a failed hook's policy applied) keeps the change too.
                with contextlib.suppress(DatabaseError):
                    await battery.store.synced()
                raise
            await _synced_or_abort(battery, context)
            return reply

        return grpc.unary_unary_rpc_method_handler(unary, **kwargs)
    if handler.unary_stream is not None:
        stream_inner = handler.unary_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for message in stream_inner(request, context):
                await _synced_or_abort(battery, context)
                yield message

        return grpc.unary_stream_rpc_method_handler(stream, **kwargs)
    return handler


def _refusing(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same shape as handler that fails every call with code."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield None  # pragma: no cover - abort raises

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(stream, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(stream, **kwargs)
    return grpc.unary_unary_rpc_method_handler(unary, **kwargs)
