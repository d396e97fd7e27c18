"""Issue 43, finding 5: the Exec Agent's server closes connections whose client pings too often,
and the client library's keepalive stays within what it permits (EA-124).

Real gRPC servers and channels on loopback, with the agent's own channel arguments
(`exec_agent.server.server_options`) and the client library's (`client._transport.
KEEPALIVE_OPTIONS`). Keepalive works in tens of seconds, so both sides' intervals are divided by
the same `SCALE`: what is checked is what gRPC does with the two settings side by side, an idle
exec stream kept open through several of the client's pings; and a client pinging every second,
sooner than the server allows (scaled by `EAGER_SCALE` to 1.5 s), cut off."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from batteryop.client._transport import KEEPALIVE_OPTIONS, KEEPALIVE_TIME_MS
from batteryop.exec_agent.config import AgentConfig
from batteryop.exec_agent.server import MIN_PING_INTERVAL_MS, server_options

SCALE = 100
"""The client's 5 minutes become 3 s, the server's 30 s 300 ms."""
EAGER_SCALE = 20
"""The server's 30 s become 1.5 s: gRPC's client sends pings 1 s apart at the soonest, which is
what the eager client does."""
IDLE_SECONDS = 10.0
"""How long the stream stays without data: three of the client's (scaled) pings."""

METHOD = "/keepalive.Echo/Stream"

SERVER_KEYS_SCALED = ("grpc.http2.min_ping_interval_without_data_ms",)
CLIENT_KEYS_SCALED = ("grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms")


def scaled(
    options: Sequence[tuple[str, Any]], keys: Sequence[str], scale: int = SCALE
) -> list[tuple[str, Any]]:
    return [(k, v // scale if k in keys else v) for k, v in options]


def agent_options(scale: int) -> list[tuple[str, Any]]:
    config = AgentConfig(
        node_name="host-a",
        address="127.0.0.1",
        flintlockd="127.0.0.1:9090",
        tls_cert_file=Path("cert"),
        tls_key_file=Path("key"),
        flintlockd_ca_file=Path("ca"),
        flintlockd_cert_file=Path("cert"),
        flintlockd_key_file=Path("key"),
    )
    return scaled(server_options(config), SERVER_KEYS_SCALED, scale)


async def echo(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
    async for request in requests:
        yield request


@contextlib.asynccontextmanager
async def echo_server(scale: int) -> AsyncIterator[str]:
    server = grpc.aio.server(options=agent_options(scale))
    handler = grpc.stream_stream_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("keepalive.Echo", {"Stream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def idle_stream_survives(target: str, options: Sequence[tuple[str, Any]]) -> bool:
    """Whether a stream kept without data for `IDLE_SECONDS` still echoes afterwards."""
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = channel.stream_stream(METHOD)()
        await call.write(b"start")
        assert await call.read() == b"start"
        ended = asyncio.ensure_future(call.read())
        done, _ = await asyncio.wait([ended], timeout=IDLE_SECONDS)
        if done:
            with contextlib.suppress(grpc.aio.AioRpcError):
                ended.result()
            return False  # the connection was closed under the stream
        await call.write(b"after")
        got = await asyncio.wait_for(ended, 10)
        call.cancel()
        return bool(got == b"after")


@pytest.mark.req("EA-124")
async def test_the_clients_keepalive_is_accepted_and_an_eager_pinger_is_cut_off() -> None:
    assert KEEPALIVE_TIME_MS >= MIN_PING_INTERVAL_MS
    client = scaled(KEEPALIVE_OPTIONS, CLIENT_KEYS_SCALED)
    eager = [(k, 1000 if k == "grpc.keepalive_time_ms" else v) for k, v in client]
    async with echo_server(SCALE) as target:
        assert await idle_stream_survives(target, client), "the client's keepalive was refused"
    async with echo_server(EAGER_SCALE) as target:
        assert not await idle_stream_survives(
            target, eager
        ), "a client pinging every second kept its connection: no enforcement"
