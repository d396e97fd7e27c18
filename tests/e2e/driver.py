"""What the end-to-end tests do to the stack: the `battery` CLI, watches, the fakes' controls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp

from batteryop.api import names, samples
from batteryop.battery import configfile
from batteryop.devstack.cluster import DEMO_HOLDER, DEMO_NAMESPACE, apply
from batteryop.devstack.stack import Stack
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import Resource
from batteryop.testing import exposition
from batteryop.testing.polling import wait_until

Body = dict[str, Any]
CLI_TIMEOUT = 120.0
T = TypeVar("T")


async def cli(
    stack: Stack, *args: str, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """`battery args` from the client venv, with the stack's `env` file's environment."""
    process = await asyncio.create_subprocess_exec(
        "battery",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**stack.cli_env(), **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def until(
    kube: KubeClient,
    res: Resource,
    name: str,
    done: Callable[[Body | None], bool],
    *,
    namespace: str | None = DEMO_NAMESPACE,
    timeout: float = 60.0,
    what: str = "",
) -> Body | None:
    """The object once `done(body)` holds (None: it is gone), by a watch from the read."""
    seen: list[Body | None] = [None]

    async def wait() -> Body | None:
        while True:
            try:
                body: Body | None = await kube.get(res, name, namespace)
            except NotFoundError:
                body = None
            seen[0] = body
            if done(body):
                return body
            version = (
                body["metadata"]["resourceVersion"]
                if body
                else (await kube.list(res, namespace)).resource_version
            )
            async for kind, obj in kube.watch(
                res,
                namespace,
                field_selector=f"metadata.name={name}",
                resource_version=version,
                timeout_seconds=int(timeout) + 5,
            ):
                current = None if kind == "DELETED" else obj
                seen[0] = current
                if done(current):
                    return current

    try:
        return await asyncio.wait_for(wait(), timeout)
    except TimeoutError:
        raise AssertionError(
            f"{res.plural}/{name}: not {what or 'done'} within {timeout:.0f}s; last: {seen[0]}"
        ) from None


async def eventually(check: Callable[[], Awaitable[T]], within: float, what: str) -> T:
    """`check()`'s first truthy answer. The fakes' control APIs cannot be watched (flintlock
    and battery have no watch), so they are polled (`testing.polling`)."""
    return await wait_until(check, bool, what=what, within=within)


def condition(body: Body | None, type_: str) -> Body:
    for c in ((body or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


def phase(body: Body | None) -> str | None:
    return ((body or {}).get("status") or {}).get("phase")


async def create_claim(kube: KubeClient, name: str, pool: str) -> Body:
    return await apply(kube, samples.sample_claim(name, pool, DEMO_HOLDER, DEMO_NAMESPACE))


async def control(url: str, method: str = "GET", body: Mapping[str, Any] | None = None) -> Body:
    """A call to a fake's control API (fake battery TD-108, fake flintlockd TD-109)."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, url, json=body) as answer,
    ):
        data: Body = await answer.json()
        assert answer.status == 200, (url, data)
        return data


async def battery_state(stack: Stack) -> Body:
    return await control(f"{stack.battery_control}/state")


def leases_for(state: Body, claim_uid: str) -> list[Body]:
    """battery's Leases for a claim, from its state (CL-060: the request id is the claim's uid)."""
    return [x for x in state.get("leases", []) if x.get("request_id") == claim_uid]


def battery_hosts(state: Body) -> dict[str, Body]:
    """battery's Hosts by name from its state, without the config's placeholder."""
    return {h["name"]: h for h in state["hosts"] if h["name"] != configfile.NO_HOSTS_NAME}


def battery_pool_hosts(state: Body, pool: str) -> list[str] | None:
    """The `flintlock_hosts` of battery's spec of the Pool `pool`."""
    for p in state["pools"]:
        spec = p["spec"]
        if spec.get("name") == pool:
            return sorted(spec.get("flintlock_hosts") or [])
    return None


def report(node: Body | None) -> tuple[str | None, str | None]:
    """The Exec Agent's report on a Node: (ready annotation, flintlockd address)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(names.EXEC_AGENT_READY_ANNOTATION),
        annotations.get(names.FLINTLOCKD_ADDRESS_ANNOTATION),
    )


def metric(text: str, name: str) -> float:
    """One sample of a Prometheus text exposition, which must be there."""
    found = exposition.samples(text)
    assert name in found, f"no sample {name} in:\n{text}"
    return found[name]


async def fetch(url: str) -> str:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as answer:
        assert answer.status == 200, url
        return await answer.text()
