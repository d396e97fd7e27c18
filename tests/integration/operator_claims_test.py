"""The operator, as a process, binds a claim to one warm MicroVM and releases it (CL-*)."""

from __future__ import annotations

import asyncio

import pytest
from integration.stack import (
    Stack,
    condition,
    create_claim,
    ready_pool,
    wait_for,
    wait_phase,
)

from batteryop.api import names
from batteryop.manifests import admission
from batteryop.testing import exposition
from batteryop.testing.localstack import install_finalizer_policy, wait_finalizer_policy
from batteryop.testing.polling import wait_until


@pytest.mark.req("CL-001")
async def test_without_the_finalizer_policy_the_operator_stores_the_finalizer_first(
    stack: Stack, namespace: str
) -> None:
    """The policy only saves a write: a claim created without it still gets the finalizer,
    from the operator, before it is bound."""
    await asyncio.to_thread(ready_pool, stack, namespace)
    stack.custom.delete_cluster_custom_object(
        admission.GROUP,
        admission.VERSION,
        admission.PLURALS["MutatingAdmissionPolicyBinding"],
        names.FINALIZER_POLICY,
    )
    try:
        await asyncio.to_thread(wait_finalizer_policy, stack.api, False)
        created = create_claim(stack, namespace, "bare")
        assert "finalizers" not in created["metadata"]
        bound = await asyncio.to_thread(wait_phase, stack, namespace, "bare", "Bound")
        assert bound["metadata"]["finalizers"] == [names.CLAIM_FINALIZER]
    finally:
        await asyncio.to_thread(install_finalizer_policy, stack.api)


@pytest.mark.req("CL-001", "CL-002", "CL-008", "CL-060", "CL-020")
async def test_a_claim_binds_one_warm_microvm_and_releases_it(stack: Stack, namespace: str) -> None:
    await asyncio.to_thread(ready_pool, stack, namespace)
    created = create_claim(stack, namespace, "c1")
    bound = await asyncio.to_thread(wait_phase, stack, namespace, "c1", "Bound")
    status = bound["status"]
    assert bound["metadata"]["finalizers"] == [names.CLAIM_FINALIZER]
    assert condition(bound, "Bound")["reason"] == "Bound"  # type: ignore[index]
    leases = stack.battery.lease_records()
    mine = [lease for lease in leases if lease.lease_id == status["leaseID"]]
    assert len(mine) == 1, leases
    # CL-060: battery's Lease carries the claim's uid as its request id.
    assert mine[0].request_id == created["metadata"]["uid"]
    assert mine[0].vm_uid == status["microVM"]["uid"]
    assert status["host"]["nodeName"] in ("host-a", "host-b")

    stack.custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, "c1"
    )
    await asyncio.to_thread(
        wait_for, stack, names.CLAIM_PLURAL, namespace, "c1", lambda b: b is None, what="gone"
    )
    assert not [x for x in stack.battery.lease_records() if x.lease_id == status["leaseID"]]


@pytest.mark.req("CL-061")
async def test_a_lost_claim_answer_is_retried_into_the_same_lease(
    stack: Stack, namespace: str
) -> None:
    await asyncio.to_thread(ready_pool, stack, namespace)
    stack.battery.lose_claim_answers(times=1)  # the Lease commits, the answer is lost
    create_claim(stack, namespace, "lost")
    bound = await asyncio.to_thread(wait_phase, stack, namespace, "lost", "Bound")
    leases = [x for x in stack.battery.lease_records() if x.request_id == bound["metadata"]["uid"]]
    assert [x.lease_id for x in leases] == [bound["status"]["leaseID"]]


@pytest.mark.req("CL-061", "CL-008")
async def test_an_operator_killed_after_battery_committed_gets_the_same_lease_after_restart(
    stack: Stack, namespace: str
) -> None:
    await asyncio.to_thread(ready_pool, stack, namespace)
    stack.battery.delay_claims(5.0, after_commit=True)  # committed, answer held back
    created = create_claim(stack, namespace, "crash")
    uid = created["metadata"]["uid"]
    await stack.battery.wait_for(
        lambda: any(x.request_id == uid for x in stack.battery.lease_records()),
        within=30,
        what="battery to commit the claim's Lease",
    )
    await stack.local.restart_operator(crash=True)  # dies before it could write the status
    stack.battery.clear_faults()
    bound = await asyncio.to_thread(wait_phase, stack, namespace, "crash", "Bound")
    leases = [x for x in stack.battery.lease_records() if x.request_id == uid]
    assert [x.lease_id for x in leases] == [bound["status"]["leaseID"]]


@pytest.mark.req("DP-102")
async def test_metrics_report_claims_by_phase_and_bind_latency(
    stack: Stack, namespace: str
) -> None:
    await asyncio.to_thread(ready_pool, stack, namespace)
    create_claim(stack, namespace, "c3")
    await asyncio.to_thread(wait_phase, stack, namespace, "c3", "Bound")

    # The operator sees the Bound claim through its own watch, maybe after this test did.
    # Claims of earlier tests live on (no namespace controller here), so count at least one.
    def seen_bound(text: str) -> bool:
        return (
            exposition.value(text, 'battery_operator_claims_by_phase{phase="Bound"}') >= 1
            and exposition.value(text, "battery_operator_claim_bind_seconds_count") >= 1
        )

    text = await wait_until(
        stack.operator.metrics, seen_bound, what="a Bound claim counted", within=15
    )
    assert "battery_operator_battery_subscribed 1.0" in text
    assert 'battery_operator_battery_call_seconds_count{code="OK",rpc="ClaimVM"}' in text
