"""The `battery` command as a process against the real kube-apiserver (no operator): how it
logs in (CC-112), a Pool that does not exist (CC-113), and Ctrl-C during clean-up (CC-108).

The Ctrl-C tests put a few-line proxy between the command and the API server. It holds a
claim's DELETE until the test lets it through, so a second Ctrl-C surely lands while the
claim is being deleted; a DELETE whose client went away meanwhile is dropped, as the API
server would never have seen it. It can also hold the answer to a claim's POST, so Ctrl-C
surely lands after the claim is made and before the command knows its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.client.cli import EXIT_ERROR, EXIT_EXEC_ERROR, EXIT_INTERRUPTED
from batteryop.kube.exec_plugin_test import Stub, credential
from batteryop.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


async def battery(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "batteryop.client.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )


async def finished(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def claims(kube_admin: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    found = k8s.CustomObjectsApi(kube_admin).list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
    )
    return list(found["items"])


# -- logging in (CC-112) -------------------------------------------------------------------------


def split_kubeconfig(controlplane: ControlPlane, stub: Stub, where: Path) -> str:
    """Two files as $KUBECONFIG: the first names the current context, the second holds the
    cluster and the exec user, and a current-context of its own that must not win."""
    whole = controlplane.kubeconfig()
    first = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "sso"}}],
    }
    second = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "elsewhere",
        "clusters": [{"name": "c", "cluster": whole["clusters"][0]["cluster"]}],
        "users": [{"name": "sso", "user": {"exec": stub.exec_entry()}}],
    }
    (where / "first").write_text(json.dumps(first))
    (where / "second").write_text(json.dumps(second))
    return os.pathsep.join([str(where / "first"), str(where / "missing"), str(where / "second")])


@pytest.mark.req("CC-105", "CC-112")
async def test_battery_logs_in_through_an_exec_plugin_named_in_a_kubeconfig_list(
    controlplane: ControlPlane, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    stub = Stub(tmp_path / "plugin")
    admin = controlplane.admin
    stub.answers(
        credential(
            clientCertificateData=admin.cert_pem.decode(), clientKeyData=admin.key_pem.decode()
        )
    )
    kubeconfig = split_kubeconfig(controlplane, stub, tmp_path)
    code, out, err = await finished(
        await battery("-n", namespace, "ls", env={"KUBECONFIG": kubeconfig})
    )
    assert (code, err) == (0, ""), err
    assert out.split() == ["NAME", "POOL", "PHASE", "NODE", "MICROVM", "EXPIRES"]
    assert len(stub.runs) == 1


@pytest.mark.req("CC-109", "CC-112")
async def test_a_failing_exec_plugin_is_one_line_naming_it(
    controlplane: ControlPlane, crds: list[str], namespace: str, tmp_path: Path
) -> None:
    stub = Stub(tmp_path / "plugin")
    stub.answers({"exit": 3, "stderr": "no SSO session\n"})
    kubeconfig = split_kubeconfig(controlplane, stub, tmp_path)
    code, out, err = await finished(
        await battery("--kubeconfig", kubeconfig, "-n", namespace, "ls")
    )
    assert (code, out) == (EXIT_ERROR, "")
    # The plugin's own message, then ours: one line naming the plugin and what it did.
    plugin_said, ours = err.splitlines()
    assert plugin_said == "no SSO session"
    assert ours.startswith(
        f"battery: error: listing claims in {namespace}: Kubernetes configuration"
    )
    assert ours.endswith(f"exec plugin '{stub.path}': exited with code 3")


# -- a Pool that does not exist (CC-113) ---------------------------------------------------------


@pytest.mark.req("CC-109", "CC-113")
async def test_a_claim_on_a_pool_that_does_not_exist_fails_at_once(
    controlplane: ControlPlane, crds: list[str], namespace: str, kube_admin: k8s.ApiClient
) -> None:
    env = {"KUBECONFIG": str(controlplane.admin_kubeconfig)}
    code, out, err = await finished(
        await battery("-n", namespace, "run", "nosuchpool", "--", "true", env=env)
    )
    assert (code, out) == (EXIT_EXEC_ERROR, "")
    assert err == f"battery: error: Pool nosuchpool does not exist in namespace {namespace}\n"
    assert claims(kube_admin, namespace) == []


# -- a second Ctrl-C while a claim is deleted (CC-108) ---------------------------------------------


class HoldingProxy:
    """Forwards plain HTTP to the API server as the admin; holds claim DELETEs until `let_go`."""

    def __init__(self, controlplane: ControlPlane) -> None:
        self.upstream = controlplane.url
        self.ssl = controlplane.ssl_context()
        self.created = asyncio.Event()
        self.deleting = asyncio.Event()
        self.let_go = asyncio.Event()
        self.answer = asyncio.Event()  # cleared: a claim's POST is made but its answer held
        self.answer.set()
        self.forwarded_deletes: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        is_claims = f"/{names.CLAIM_PLURAL}" in request.path
        if request.method == "DELETE" and is_claims:
            self.deleting.set()
            await self.let_go.wait()
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499)  # its client went away: never sent
            self.forwarded_deletes.append(request.path)
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                self.upstream + request.path_qs,
                data=await request.read(),
                headers={
                    k: v
                    for k, v in request.headers.items()
                    if k.lower() in ("content-type", "accept")
                },
                ssl=self.ssl,
                timeout=aiohttp.ClientTimeout(total=None),
            ) as upstream,
        ):
            if request.method == "POST" and is_claims and upstream.status == 201:
                self.created.set()
                await self.answer.wait()
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture
async def proxy(
    controlplane: ControlPlane, tmp_path: Path
) -> AsyncIterator[tuple[HoldingProxy, Path]]:
    holding = HoldingProxy(controlplane)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", holding.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "proxy",
        "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "contexts": [{"name": "proxy", "context": {"cluster": "proxy"}}],
    }
    path = tmp_path / "proxy.kubeconfig"
    path.write_text(json.dumps(kubeconfig))
    yield holding, path
    holding.let_go.set()
    await runner.cleanup()


async def interrupted(process: asyncio.subprocess.Process) -> bytes:
    """Send SIGINT until the command says something on stderr, and return that line. Signals
    sent before it handled the first merge into one, so one is sent again each half second
    until one has been taken; the line says which path it took."""
    assert process.stderr is not None
    async with asyncio.timeout(30):
        while True:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(process.stderr.readline(), 0.5)


@pytest.mark.req("CC-005", "CC-108")
async def test_ctrl_c_before_the_claims_creation_is_answered_still_deletes_it(
    crds: list[str], namespace: str, kube_admin: k8s.ApiClient, proxy: tuple[HoldingProxy, Path]
) -> None:
    """The claim exists once the API server has made it, but only the answer to the POST
    names it (generateName): Ctrl-C in between must wait for that answer, then delete it."""
    holding, kubeconfig = proxy
    holding.answer.clear()
    holding.let_go.set()
    process = await battery(
        "--kubeconfig", str(kubeconfig), "-n", namespace, "run", "later", "--wait-for-pool",
        "--", "true",
    )  # fmt: skip
    await asyncio.wait_for(holding.created.wait(), 30)
    [claim] = claims(kube_admin, namespace)  # made; the command has not heard so yet
    # The first SIGINT taken stops the wait; the next says the clean-up is under way, so the
    # answer is let through only once the command has stopped waiting for it.
    assert await interrupted(process) == b"battery: interrupted; cleaning up, please wait\n"
    holding.answer.set()
    code, _, err = await finished(process)
    assert code == EXIT_INTERRUPTED, err
    assert holding.forwarded_deletes == [
        f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.CLAIM_PLURAL}/{claim['metadata']['name']}"
    ]
    assert claims(kube_admin, namespace) == []


@pytest.mark.req("CC-005", "CC-108")
async def test_a_second_ctrl_c_while_the_claim_is_deleted_does_not_leak_it(
    crds: list[str], namespace: str, kube_admin: k8s.ApiClient, proxy: tuple[HoldingProxy, Path]
) -> None:
    holding, kubeconfig = proxy
    process = await battery(
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        namespace,
        "run",
        "later",
        "--wait-for-pool",
        "--",
        "true",
    )
    await asyncio.wait_for(holding.created.wait(), 30)
    [claim] = claims(kube_admin, namespace)
    process.send_signal(signal.SIGINT)  # stop waiting: the claim is deleted (CC-005)...
    await asyncio.wait_for(holding.deleting.wait(), 30)
    process.send_signal(signal.SIGINT)  # ...and a second Ctrl-C lands while it is
    assert process.stderr is not None
    said = await asyncio.wait_for(process.stderr.readline(), 30)
    assert said == b"battery: interrupted; cleaning up, please wait\n"
    holding.let_go.set()
    code, _, err = await finished(process)
    assert code == EXIT_INTERRUPTED, err
    assert err.rstrip().endswith("battery: interrupted")
    assert holding.forwarded_deletes == [
        f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.CLAIM_PLURAL}/{claim['metadata']['name']}"
    ]
    assert claims(kube_admin, namespace) == []
