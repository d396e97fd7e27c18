"""The operator, as a process, keeps a Pool in battery and lets it go (PO-*)."""

from __future__ import annotations

import asyncio

import pytest
from integration.stack import Stack, create_demo_pool, ready, wait_for

from batteryop.api import names


@pytest.mark.req("PO-001", "PO-010", "PO-020", "PO-022", "RS-106")
async def test_a_pool_is_created_in_battery_and_reports_ready(stack: Stack, namespace: str) -> None:
    create_demo_pool(stack, namespace)
    body = await asyncio.to_thread(
        wait_for, stack, names.POOL_PLURAL, namespace, "demo", ready, what="Ready=True"
    )
    assert body is not None
    # Our finalizer only, and nothing of kopf's (no kopf finalizer, no progress annotations).
    assert body["metadata"]["finalizers"] == [names.POOL_FINALIZER]
    assert not [a for a in body["metadata"].get("annotations") or {} if "kopf" in a]
    status = body["status"]
    assert status["available"] + status.get("leased", 0) + status.get("provisioning", 0) >= 2
    assert status["observedGeneration"] == body["metadata"]["generation"]
    # RS-106: the scale subresource's current replicas (ImmediateOnLease: the warm MicroVMs).
    assert status["replicas"] == status["available"] + status.get("provisioning", 0)
    assert status["selector"] == names.pool_selector("demo")
    # battery holds it on both published Hosts (the demo Pool selects every Host).
    held = [p for p in stack.battery.pool_specs() if p.name == "demo" and p.namespace == namespace]
    assert len(held) == 1
    assert sorted(held[0].flintlock_hosts) == ["host-a", "host-b"]


@pytest.mark.req("PO-044")
async def test_deleting_a_pool_removes_it_from_battery_then_the_finalizer(
    stack: Stack, namespace: str
) -> None:
    create_demo_pool(stack, namespace)
    await asyncio.to_thread(
        wait_for, stack, names.POOL_PLURAL, namespace, "demo", ready, what="Ready=True"
    )
    stack.custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, "demo"
    )
    await asyncio.to_thread(
        wait_for, stack, names.POOL_PLURAL, namespace, "demo", lambda b: b is None, what="gone"
    )
    assert not [p for p in stack.battery.pool_specs() if p.namespace == namespace]
