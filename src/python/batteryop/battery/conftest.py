"""A scripted battery on a real grpc.aio loopback server, for the client's own tests.

Not a fake battery (that lives in `batteryop.testing.fake_battery`): each RPC answers exactly
what a test scripts (a message, a status code, a delay), and every request is recorded with
its metadata, deadline and full method name, so the tests can prove what went over the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import empty_pb2

from battery_protos.poolmgr.v1alpha1 import (
    events_pb2_grpc,
    hostadmin_pb2_grpc,
    lease_pb2_grpc,
    pooladmin_pb2_grpc,
    types_pb2,
)
from batteryop.api._compat import within
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig, ReconnectPolicy
from batteryop.battery.observer import CallObserver

FAST_RECONNECT = ReconnectPolicy(
    initial=timedelta(milliseconds=10), maximum=timedelta(milliseconds=50), jitter=0.1
)
WAIT = 5.0  # seconds: the bound on every wait for something the server or client does


@dataclass
class Answer:
    """What one scripted RPC does: wait `delay`, then fail with `code` or return `response`."""

    response: Any = None
    code: grpc.StatusCode | None = None
    details: str = ""
    delay: float = 0.0


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    request: Any
    metadata: dict[str, str]
    time_remaining: float | None


@dataclass
class Session:
    """One Subscribe stream: send `events`, then `drop` with `code`, `end`, or `hold` open."""

    events: list[types_pb2.Event] = field(default_factory=list)
    then: str = "hold"
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE


class ScriptedBattery:
    """Scripts and records battery's RPCs."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer | Callable[[Any], Answer]] = {}
        self.received: list[Received] = []
        self.sessions: list[Session] = []
        self.subscribes = 0
        self.wire_methods: list[str] = []  # full method names, as the server routed them
        self.changed = asyncio.Condition()

    def answer(
        self,
        rpc: str,
        response: Any = None,
        *,
        code: grpc.StatusCode | None = None,
        details: str = "",
        delay: float = 0.0,
    ) -> None:
        self.answers[rpc] = Answer(response, code, details, delay)

    def requests(self, rpc: str) -> list[Received]:
        return [r for r in self.received if r.method.endswith(f"/{rpc}")]

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        """Wait until predicate() holds (re-checked on every request), or fail naming `what`."""
        async with self.changed:
            try:
                await within(self.changed.wait_for(predicate), WAIT)
            except TimeoutError:
                pytest.fail(f"timed out after {WAIT}s waiting for {what}")

    async def _record(self, rpc: str, request: Any, context: Any) -> None:
        metadata = {k: v for k, v in context.invocation_metadata() or ()}
        self.received.append(Received(rpc, request, metadata, context.time_remaining()))
        async with self.changed:
            self.changed.notify_all()

    async def unary(self, method: str, request: Any, context: Any) -> Any:
        await self._record(method, request, context)
        rpc = method.rsplit("/", 1)[-1]
        scripted = self.answers.get(rpc)
        if scripted is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not scripted")
            raise AssertionError("context.abort returned")
        answer = scripted(request) if callable(scripted) else scripted
        if answer.delay:
            await asyncio.sleep(answer.delay)  # battery being slow, not the test waiting
        if answer.code is not None:
            await context.abort(answer.code, answer.details)
        return answer.response if answer.response is not None else empty_pb2.Empty()

    async def subscribe(self, request: Any, context: Any) -> AsyncIterator[types_pb2.Event]:
        await self._record("/poolmgr.v1alpha1.Events/Subscribe", request, context)
        index = self.subscribes
        self.subscribes += 1
        session = self.sessions[index] if index < len(self.sessions) else Session()
        for event in session.events:
            yield event
        if session.then == "drop":
            await context.abort(session.code, "stream dropped by the test server")
        elif session.then == "hold":
            await asyncio.Event().wait()  # open until the client or the server stops


class _MethodRecorder(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, battery: ScriptedBattery) -> None:
        self._battery = battery

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        self._battery.wire_methods.append(details.method)
        return await continuation(details)


def _method(service: str, rpc: str) -> str:
    return f"/poolmgr.v1alpha1.{service}/{rpc}"


def _servicers(battery: ScriptedBattery) -> list[tuple[Any, Callable[[Any, Any], None]]]:
    def unary(service: str, rpc: str) -> Callable[..., Any]:
        async def handler(self: Any, request: Any, context: Any) -> Any:
            return await battery.unary(_method(service, rpc), request, context)

        return handler

    def servicer(base: type, service: str, rpcs: Iterable[str]) -> Any:
        cls = type(f"Scripted{service}", (base,), {rpc: unary(service, rpc) for rpc in rpcs})
        return cls()

    class Events(events_pb2_grpc.EventsServicer):
        async def Subscribe(self, request: Any, context: Any) -> AsyncIterator[types_pb2.Event]:
            async for event in battery.subscribe(request, context):
                yield event

    pool_rpcs = ["CreatePool", "UpdatePool", "DeletePool", "GetPool", "ListPools"]
    lease_rpcs = ["ClaimVM", "Heartbeat", "ReleaseVM", "ListLeases"]
    host_rpcs = [
        "CordonHost",
        "UncordonHost",
        "ListHosts",
        "AddHost",
        "UpdateHost",
        "RemoveHost",
        "GetHost",
    ]
    return [
        (
            servicer(pooladmin_pb2_grpc.PoolAdminServicer, "PoolAdmin", pool_rpcs),
            pooladmin_pb2_grpc.add_PoolAdminServicer_to_server,
        ),
        (
            servicer(lease_pb2_grpc.LeaseServicer, "Lease", lease_rpcs),
            lease_pb2_grpc.add_LeaseServicer_to_server,
        ),
        (
            servicer(hostadmin_pb2_grpc.HostAdminServicer, "HostAdmin", host_rpcs),
            hostadmin_pb2_grpc.add_HostAdminServicer_to_server,
        ),
        (Events(), events_pb2_grpc.add_EventsServicer_to_server),
    ]


@dataclass
class Served:
    """A running scripted server."""

    battery: ScriptedBattery
    server: grpc.aio.Server
    port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self, **overrides: Any) -> BatteryConfig:
        base = BatteryConfig(
            target=self.target,
            call_timeout=timedelta(seconds=WAIT),
            reconnect=FAST_RECONNECT,
        )
        return replace(base, **overrides)


@asynccontextmanager
async def serve(
    credentials: grpc.ServerCredentials | None = None, port: int = 0
) -> AsyncIterator[Served]:
    """Start a scripted battery on 127.0.0.1 (plaintext unless credentials are given)."""
    battery = ScriptedBattery()
    server = grpc.aio.server(interceptors=[_MethodRecorder(battery)])
    for servicer, add in _servicers(battery):
        add(servicer, server)
    address = f"127.0.0.1:{port}"
    if credentials is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, credentials)
    await server.start()
    try:
        yield Served(battery, server, bound)
    finally:
        await server.stop(None)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serve() as running:
        yield running


ClientFactory = Callable[..., AbstractAsyncContextManager[BatteryClient]]


@pytest.fixture
def client_for(served: Served) -> ClientFactory:
    """`async with client_for(call_timeout=...) as battery:` a client of the served battery."""

    @asynccontextmanager
    async def make(
        observer: CallObserver | None = None, **overrides: Any
    ) -> AsyncIterator[BatteryClient]:
        async with BatteryClient.connect(served.config(**overrides), observer=observer) as c:
            yield c

    return make


@pytest.fixture
async def battery(served: Served) -> AsyncIterator[BatteryClient]:
    async with BatteryClient.connect(served.config()) as client:
        yield client


class RecordingObserver:
    """Collects `on_call` reports."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def on_call(self, rpc: str, code: str, seconds: float) -> None:
        self.calls.append((rpc, code, seconds))
