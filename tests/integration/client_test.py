"""The client library against the real control plane, the operator as a process and the fake
battery (CC-*): claims bind by watch, exhausted Pools are reported, giving up deletes the claim,
renewals move the lease, lost leases and unready Hosts are reported, release deletes.

The client acts as a least-privilege consumer ServiceAccount with exactly the permissions the
AsyncClient docstring lists; the Holder is a second ServiceAccount.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from integration.consumer import HOLDER, consumer_kubeconfig, gone, ready_pool
from integration.stack import Stack, condition_is, phase, wait_for
from integration.standin import report_nodes
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.client import (
    AsyncClaim,
    AsyncClient,
    ExecResult,
    HostNotReadyError,
    LeaseLostError,
    MockExecTransport,
    Pending,
    PoolExhaustedError,
    PoolNotFoundError,
)
from batteryop.kube.config import KubeConfig


@pytest.fixture
async def client(stack: Stack, namespace: str, tmp_path: Path) -> AsyncIterator[AsyncClient]:
    path = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")
    async with AsyncClient(
        namespace=namespace, kube_config=KubeConfig.from_kubeconfig(str(path))
    ) as c:
        yield c


def review(stack: Stack, token: str) -> Any:
    spec = k8s.V1TokenReviewSpec(token=token, audiences=[names.EXEC_AGENT_AUDIENCE])
    return k8s.AuthenticationV1Api(stack.api).create_token_review(k8s.V1TokenReview(spec=spec))


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@pytest.mark.req("CC-001", "CC-002", "CC-003", "CC-021")
async def test_a_claim_binds_with_its_secret_and_token_and_release_deletes_both(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace)
    started = time.perf_counter()
    claim = await client.claim("demo", HOLDER, timeout=60)
    bound_in = time.perf_counter() - started
    print(f"\nclaim -> Bound through the library: {bound_in * 1000:.0f} ms")
    try:
        body = stack.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, claim.name
        )
        assert phase(body) == "Bound"
        assert claim.uid == body["metadata"]["uid"]
        assert claim.microvm_uid == body["status"]["microVM"]["uid"]
        assert claim.node_name == body["status"]["host"]["nodeName"]
        assert claim.name.startswith("demo-")
        leases = [x for x in stack.battery.lease_records() if x.request_id == claim.uid]
        assert [x.vm_uid for x in leases] == [claim.microvm_uid]

        # CC-001: the Secret is empty and owned by this claim.
        secret = k8s.CoreV1Api(stack.api).read_namespaced_secret(
            names.exec_secret_name(claim.name), namespace
        )
        assert not secret.data
        assert [(o.kind, o.uid) for o in secret.metadata.owner_references] == [
            ("MicroVMClaim", claim.uid)
        ]

        # CC-002: the Holder's token, for the agent's audience, bound to that Secret.
        token = await claim.token()
        answer = review(stack, token)
        authenticated = bool(answer.status.authenticated)
        assert authenticated
        assert answer.status.user.username == f"system:serviceaccount:{namespace}:{HOLDER}"
        bound_to = jwt_claims(token)["kubernetes.io"]["secret"]
        assert bound_to == {"name": secret.metadata.name, "uid": secret.metadata.uid}
        same = await claim.token() == token
        assert same  # reused until two thirds of its life
    finally:
        await claim.release()
    await claim.release()  # idempotent
    await gone(stack, namespace, claim.name)
    with pytest.raises(k8s.ApiException) as missing:
        k8s.CoreV1Api(stack.api).read_namespaced_secret(
            names.exec_secret_name(claim.name), namespace
        )
    assert missing.value.status == 404


@pytest.mark.req("CC-004", "CC-005")
async def test_an_exhausted_pool_is_reported_and_giving_up_deletes_the_claim(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, size=0)
    seen: list[Pending] = []
    with pytest.raises(PoolExhaustedError) as gave_up:
        # The exhaustion ends the wait as soon as the operator reports it; the timeout is
        # only the bound on a loaded machine (a ClaimTimeoutError would fail the test).
        await client.claim("demo", HOLDER, on_pending=seen.append, timeout=30)
    assert any(p.pool_exhausted for p in seen), seen
    assert gave_up.value.claim is not None
    await gone(stack, namespace, gave_up.value.claim)


@pytest.mark.req("CC-005")
async def test_cancelling_the_wait_deletes_the_claim(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, size=0)
    waiting = asyncio.Event()
    task = asyncio.create_task(
        client.claim("demo", HOLDER, name="cancelled", on_pending=lambda _: waiting.set())
    )
    await asyncio.wait_for(waiting.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gone(stack, namespace, "cancelled")


@pytest.mark.req("CC-116", "CL-106", "CL-108", "RS-104")
async def test_a_claim_on_an_exhausted_pool_is_served_by_its_fallback(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, size=0)
    await ready_pool(stack, namespace, name="spare", size=1, heartbeat="3s")
    started = time.perf_counter()
    claim = await client.claim("demo", HOLDER, fallback_pools=["spare"], timeout=60)
    print(f"\nfallback claim -> Bound: {(time.perf_counter() - started) * 1000:.0f} ms")
    try:
        assert claim.pool == "spare"
        # The renewal interval is the serving Pool's, not the first one's (10 s).
        assert claim.heartbeat_interval.total_seconds() == 3
        body = stack.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, claim.name
        )
        assert body["status"]["poolRef"] == {"name": "spare"}
        [lease] = [x for x in stack.battery.lease_records() if x.request_id == claim.uid]
        assert (lease.pool_name, lease.vm_uid) == ("spare", claim.microvm_uid)
        said = (
            k8s.CoreV1Api(stack.api)
            .list_namespaced_event(namespace, field_selector=f"involvedObject.name={claim.name}")
            .items
        )
        assert any(
            e.reason == "BoundFromFallback" and "Pool demo has no available MicroVM" in e.message
            for e in said
        ), [(e.reason, e.message) for e in said]
        [info] = await client.claims()
        assert info.pool == "spare"
    finally:
        await claim.release()
    await gone(stack, namespace, claim.name)


@pytest.mark.req("CC-117", "CL-110", "CC-005")
async def test_a_claim_that_waits_for_capacity_fails_itself_and_is_deleted(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, size=0)
    with pytest.raises(PoolExhaustedError) as gave_up:
        # The operator fails the claim at 2 s; the client's own timeout only bounds the test.
        await client.claim("demo", HOLDER, wait_for_capacity=timedelta(seconds=2), timeout=60)
    assert str(gave_up.value).endswith(
        "failed: not Bound within spec.waitForCapacity (2s): "
        "Pool demo has no available MicroVM; deleted it"
    ), str(gave_up.value)
    assert gave_up.value.claim is not None
    await gone(stack, namespace, gave_up.value.claim)


@pytest.mark.req("CC-116", "CC-113")
async def test_with_fallback_pools_only_none_existing_fails_at_once(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    with pytest.raises(
        PoolNotFoundError, match=f"Pools nowhere, nor do not exist in namespace {namespace}"
    ):
        await client.claim("nowhere", HOLDER, fallback_pools=["nor"])
    await ready_pool(stack, namespace, name="spare", size=1)
    claim = await client.claim("nowhere", HOLDER, fallback_pools=["spare"], timeout=60)
    assert claim.pool == "spare"
    await claim.release()
    await gone(stack, namespace, claim.name)


@pytest.mark.req("CC-113")
async def test_a_missing_pool_fails_at_once_and_no_claim_is_made(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    with pytest.raises(
        PoolNotFoundError, match=f"Pool nowhere does not exist in namespace {namespace}"
    ) as gave_up:
        await client.claim("nowhere", HOLDER)
    assert gave_up.value.claim is None
    made = stack.custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
    )["items"]
    assert made == []


@pytest.mark.req("CC-010")
async def test_renewing_at_the_heartbeat_moves_the_lease_expiry(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, heartbeat="1s")
    async with await client.claim("demo", HOLDER, timeout=60) as claim:
        assert claim.heartbeat_interval.total_seconds() == 1
        # battery's expiry reaches the status a moment after the bind.
        first_body = await asyncio.to_thread(
            wait_for,
            stack,
            names.CLAIM_PLURAL,
            namespace,
            claim.name,
            lambda b: bool(((b or {}).get("status") or {}).get("leaseExpiresAt")),
            timeout=30,
        )
        assert first_body is not None
        first_text = first_body["status"]["leaseExpiresAt"]

        def renewed(body: dict[str, Any] | None) -> bool:
            status = (body or {}).get("status") or {}
            return (
                bool((body or {}).get("spec", {}).get("renewTime"))
                and status.get("leaseExpiresAt", first_text) > first_text
            )

        body = await asyncio.to_thread(
            wait_for, stack, names.CLAIM_PLURAL, namespace, claim.name, renewed, timeout=30
        )
        assert body is not None
        assert body["status"]["observedRenewTime"] == body["spec"]["renewTime"]
        assert not claim.lost


@pytest.mark.req("CC-012", "CC-021")
async def test_a_claim_deleted_by_someone_else_is_reported_lost(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, heartbeat="1s")
    reported: list[LeaseLostError] = []
    claim = await client.claim("demo", HOLDER, on_lost=reported.append, timeout=60)
    stack.custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, claim.name
    )
    lost = await asyncio.wait_for(claim.wait_lost(), 30)
    assert "deleted" in str(lost)
    assert reported == [lost]
    with pytest.raises(LeaseLostError):
        claim.raise_if_lost()
    assert not claim.holding
    await claim.release()  # the claim is gone already: fine


@pytest.mark.req("CC-012")
async def test_an_expired_lease_is_reported_lost(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    # Renewals stop reaching battery only once the claim is held: refused from the start, a
    # slow bind on a loaded machine let the sweeper expire the lease before the client saw
    # Bound (claim() itself raised LeaseLostError, a different path).
    await ready_pool(stack, namespace, heartbeat="1s", expiry="3s")
    claim: AsyncClaim = await client.claim("demo", HOLDER, timeout=60)
    # battery's sweeper (every 10 s of real time here) expires the unrenewed lease.
    stack.battery.refuse_heartbeats()
    try:
        lost = await asyncio.wait_for(claim.wait_lost(), 60)
        assert "Expired" in str(lost)
    finally:
        stack.battery.clear_faults()
        await claim.release()


def annotate_node(stack: Stack, node: str, annotations: dict[str, str | None]) -> None:
    k8s.CoreV1Api(stack.api).patch_node(node, {"metadata": {"annotations": annotations}})


@pytest.mark.req("CC-013")
async def test_the_first_host_not_ready_is_reported_and_the_claim_still_held(
    stack: Stack, namespace: str, client: AsyncClient
) -> None:
    await ready_pool(stack, namespace, heartbeat="1s")
    # Every Host reports ready first (the shared stack's Nodes may carry no report), so the
    # first not-ready the client sees is the one this test writes.
    ready = {names.EXEC_AGENT_READY_ANNOTATION: "true", names.EXEC_AGENT_REASON_ANNOTATION: "Ready"}
    for node in stack.local.hosts:
        annotate_node(stack, node, dict(ready))
    reports: list[HostNotReadyError] = []
    async with await client.claim(
        "demo", HOLDER, on_host_not_ready=reports.append, timeout=60
    ) as claim:
        report = {
            names.EXEC_AGENT_READY_ANNOTATION: "false",
            names.EXEC_AGENT_REASON_ANNOTATION: "KVMUnavailable",
            names.EXEC_AGENT_MESSAGE_ANNOTATION: "/dev/kvm is missing",
        }
        annotate_node(stack, claim.node_name, dict(report))
        try:
            await asyncio.to_thread(
                wait_for,
                stack,
                names.CLAIM_PLURAL,
                namespace,
                claim.name,
                condition_is("HostReady", status="False"),
                timeout=30,
            )
            await claim.renew()  # what the hold loop does each heartbeat; it reads the claim
            assert claim.host_not_ready is not None
            assert claim.host_not_ready.reason == "KVMUnavailable"
            assert "/dev/kvm is missing" in str(claim.host_not_ready)
            await claim.renew()
            assert len(reports) == 1  # reported the first time only
            assert not claim.lost
        finally:
            for node in stack.local.hosts:
                annotate_node(stack, node, {k: None for k in report})


@pytest.mark.req("CC-110")
async def test_with_the_mock_exec_transport_a_real_claim_execs_without_an_agent(
    stack: Stack, namespace: str, tmp_path: Path
) -> None:
    # The consumer's own test: claims for real, commands answered by the test (no agent).
    await ready_pool(stack, namespace)
    # Each Host's report names an agent address (nothing listens there: no agent runs).
    addresses = {node: f"192.0.2.{i}:10270" for i, node in enumerate(stack.local.hosts, 1)}
    report_nodes(stack, dict(addresses))
    transport = MockExecTransport(lambda call: ExecResult(0, stdout=b"Linux\n"))
    path = consumer_kubeconfig(stack, namespace, tmp_path / "mock.kubeconfig")
    try:
        async with AsyncClient(
            namespace=namespace,
            kube_config=KubeConfig.from_kubeconfig(str(path)),
            exec_transport=transport,
        ) as client:
            async with await client.claim("demo", HOLDER, timeout=60) as claim:
                result = await claim.exec(["uname", "-s"])
                assert (result.exit_code, result.stdout) == (0, b"Linux\n")
                [call] = transport.calls
                assert call.request.microvm_uid == claim.microvm_uid
                assert call.request.argv == ("uname", "-s")
                assert call.address == addresses[claim.node_name]
                assert review(stack, call.token).status.authenticated
            name = claim.name
    finally:
        report_nodes(stack, dict.fromkeys(addresses))
    assert transport.closed, "the client closes its transport"
    await gone(stack, namespace, name)
