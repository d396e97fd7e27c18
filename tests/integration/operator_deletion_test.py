"""A deleted Pool leaves the operator: no zombie of it survives in the cache (CL-004, PO-044).

Issue 8: a Pool deleted under many Bound and Pending claims, its claims deleted, and the Pool
gone from the API server, stayed in the operator's cache (the answer to the finalizer-removal
write came back after the watch's DELETED); a new claim on its name then read PoolDeleting
for ever instead of PoolNotFound.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from integration.stack import Stack, condition, condition_is, phase, wait_for, wait_for_all

from batteryop.api import names, samples

POOL = "burst"
SIZE = 5
CLAIMS = 15  # SIZE Bound, the rest Pending: the Pool is exhausted


def reason(body: dict[str, Any] | None) -> str | None:
    return (condition(body, "Bound") or {}).get("reason")


def counted(bodies: dict[str, dict[str, Any]]) -> tuple[int, int]:
    bound = sum(phase(b) == "Bound" for b in bodies.values())
    pending = sum(phase(b) == "Pending" and reason(b) is not None for b in bodies.values())
    return bound, pending


@pytest.mark.req("CL-004", "PO-044")
async def test_a_claim_on_the_name_of_a_pool_deleted_under_bound_and_pending_claims_is_pool_not_found(
    stack: Stack, namespace: str
) -> None:
    custom = stack.custom
    pool = samples.demo_pool(name=POOL, namespace=namespace)
    pool["spec"]["size"] = SIZE
    # Leased MicroVMs count towards the size and are not replaced: the rest stay Pending.
    pool["spec"]["replenishment"] = {"type": "ReplaceOnDelete"}
    pool["spec"]["lease"] = {"expiryThreshold": "10m"}  # nobody renews here
    custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, pool
    )
    for i in range(CLAIMS):
        body = samples.sample_claim(name=f"c{i}", pool=POOL, namespace=namespace)
        custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, body
        )
    await asyncio.to_thread(
        wait_for_all,
        stack,
        names.CLAIM_PLURAL,
        namespace,
        lambda bodies: counted(bodies) == (SIZE, CLAIMS - SIZE),
        what=f"{SIZE} Bound and {CLAIMS - SIZE} Pending",
    )

    custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, POOL
    )
    await asyncio.to_thread(
        wait_for,
        stack,
        names.POOL_PLURAL,
        namespace,
        POOL,
        condition_is("Ready", reason="DeletionBlocked"),
        what="Ready=False DeletionBlocked (Bound claims hold the Pool)",
    )
    for i in range(CLAIMS):
        custom.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, f"c{i}"
        )
    await asyncio.to_thread(
        wait_for_all,
        stack,
        names.CLAIM_PLURAL,
        namespace,
        lambda bodies: not bodies,
        what="every claim gone",
    )
    await asyncio.to_thread(
        wait_for, stack, names.POOL_PLURAL, namespace, POOL, lambda b: b is None, what="gone"
    )

    late = samples.sample_claim(name="late", pool=POOL, namespace=namespace)
    custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, late
    )
    late_body: dict[str, Any] | None = await asyncio.to_thread(
        wait_for,
        stack,
        names.CLAIM_PLURAL,
        namespace,
        "late",
        lambda b: reason(b) == "PoolNotFound",
        timeout=15,
        what="Bound=False PoolNotFound within seconds",
    )
    assert phase(late_body) == "Pending"
