"""Timeouts end as the client's own errors on every Python the wheel claims (CC-111).

On 3.10 `asyncio.TimeoutError` is not the built-in `TimeoutError` (nor an `OSError`), so code
catching only the latter let aiohttp's total timeout and `asyncio.wait_for`'s escape raw. These
tests need no control plane, so `pythons_test` runs them on 3.10 and the newest CPython too: a
server that accepts and never answers, and a few-line API server that takes a claim and never
binds it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import pytest
from aiohttp import web

from batteryop.client import AsyncClaim, AsyncClient, ClaimTimeoutError, KubeAPIError, Timeouts
from batteryop.client.hold_test import StubClient, bound_claim
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import KubeUnavailableError
from batteryop.kube.resources import CLAIMS, CONFIGMAPS, POOLS, SECRETS


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """The URL of a server that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    for w in held:
        w.close()
    server.close()
    await server.wait_closed()


@pytest.mark.req("CC-111")
async def test_a_request_stalling_past_the_total_timeout_is_kube_unavailable(
    silent_server: str,
) -> None:
    async with KubeClient(KubeConfig(server=silent_server, ca_data=None), timeout=0.3) as kube:
        with pytest.raises(KubeUnavailableError) as caught:
            await kube.get(CONFIGMAPS, "cm", "ns")
    assert caught.value.reason == "Timeout"


@pytest.mark.req("CC-111")
async def test_a_claim_against_a_stalling_api_is_the_clients_error(silent_server: str) -> None:
    client = AsyncClient(
        namespace="ns",
        kube_config=KubeConfig(server=silent_server, ca_data=None),
        timeouts=Timeouts(request=0.3),
    )
    async with client:
        with pytest.raises(KubeAPIError, match="unreachable"):
            await client.claim("demo", "sa")


class NeverBinds:
    """Just enough of the API for a claim that stays Pending: its Pool exists, the claim and
    its Secret are created, the watch stays silent, and deletes are recorded."""

    def __init__(self) -> None:
        self.deletes: list[tuple[str, dict[str, Any]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(POOLS.api_path("ns", "demo"), self.pool)
        app.router.add_post(CLAIMS.api_path("ns"), self.create_claim)
        app.router.add_get(CLAIMS.api_path("ns"), self.watch)
        app.router.add_delete(CLAIMS.api_path("ns") + "/{name}", self.delete)
        app.router.add_post(SECRETS.api_path("ns"), self.create_secret)
        app.router.add_delete(SECRETS.api_path("ns") + "/{name}", self.delete)
        return app

    async def pool(self, request: web.Request) -> web.Response:
        return web.json_response({"metadata": {"name": "demo", "namespace": "ns"}, "spec": {}})

    async def create_claim(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["metadata"].update(name="demo-abc", uid="claim-uid", resourceVersion="1")
        return web.json_response(body, status=201)

    async def create_secret(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["metadata"].update(uid="secret-uid", resourceVersion="2")
        return web.json_response(body, status=201)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.Event().wait()  # until the client goes away
        return response

    async def delete(self, request: web.Request) -> web.Response:
        self.deletes.append((request.match_info["name"], json.loads(await request.read())))
        return web.json_response({"kind": "Status", "status": "Success"})


@pytest.mark.req("CC-005", "CC-021", "CC-111")
async def test_a_claim_not_bound_in_time_is_claim_timeout_and_deleted_by_uid() -> None:
    api = NeverBinds()
    runner = web.AppRunner(api.app(), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        client = AsyncClient(
            namespace="ns",
            kube_config=KubeConfig(server=f"http://127.0.0.1:{port}", ca_data=None),
            timeouts=Timeouts(bind=0.3),
        )
        async with client:
            with pytest.raises(ClaimTimeoutError, match="was not Bound after 0.3s"):
                await client.claim("demo", "sa")
    finally:
        await runner.cleanup()
    # Both deletes carry the uid of what this claim made (a newer claim's Secret is safe).
    assert [(name, body.get("preconditions")) for name, body in api.deletes] == [
        ("demo-abc", {"uid": "claim-uid"}),
        ("demo-abc-exec", {"uid": "secret-uid"}),
    ]


class TimesOutOnce(StubClient):
    """A renewal that fails once with a library's raw timeout, then works."""

    async def _renew(self, claim: AsyncClaim) -> Any:
        if self.renewals == 0:
            self.renewals += 1
            raise asyncio.TimeoutError  # noqa: UP041 (what 3.10's aiohttp raised)
        if self.renewals >= 2:
            self.refreshed.set()
        return await super()._renew(claim)


@pytest.mark.req("CC-010", "CC-111")
async def test_the_hold_loop_keeps_renewing_after_an_unexpected_error() -> None:
    stub = TimesOutOnce([bound_claim()], token_life=600)
    claim = AsyncClaim(
        cast(AsyncClient, stub),
        bound_claim(),
        secret_uid="s1",
        heartbeat=timedelta(milliseconds=20),
    )
    claim.start_holding()
    await asyncio.wait_for(stub.refreshed.wait(), 10)
    assert claim.holding and not claim.lost
    await claim.detach()
