"""The operator, as a process, refreshes every Pool on its resync interval while it is not
subscribed to battery's Events (PO-024).

The stack's operator runs with the default flags, so the test replaces it with operators
started with `--pool-resync-interval`, and takes the same steps under each: one with an
interval far longer than the test (the control: a change made in battery alone goes unseen),
then one with a 1s interval (the change shows within a few intervals).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from integration.stack import Stack, ready_pool, wait_for

from batteryop.api import names
from batteryop.battery import BatteryClient, PoolRef
from batteryop.testing import exposition
from batteryop.testing.operator_env import battery_config
from batteryop.testing.operator_runner import OperatorProcess
from batteryop.testing.polling import wait_until

RESYNC_SECONDS = 1.0
WINDOW_SECONDS = 6.0
"""How long the test looks for a battery-side change to reach the Pool's status: a few
resync intervals for the 1s operator; the control operator is given the same window."""
QUIET_SECONDS = 1.5
"""How long the operator's Pool controller must stay idle before the test acts behind its back."""

SUBSCRIBED_METRIC = "battery_operator_battery_subscribed"

Counts = tuple[int, int, int]
"""(available, leased, provisioning)."""


@contextlib.asynccontextmanager
async def operator_with(stack: Stack, *flags: str) -> AsyncIterator[OperatorProcess]:
    """Stop the stack's operator and run one with these extra flags for the block."""
    stack.operator.stop()
    async with OperatorProcess.start(
        kubeconfig=stack.local.kubeconfig,
        battery_target=stack.battery.target,
        extra_args=flags,
    ) as proc:
        stack.local.operator = proc  # failure messages (wait_for) show its log
        yield proc


def status_counts(body: dict[str, Any] | None) -> Counts:
    s = (body or {}).get("status") or {}
    return (s.get("available", 0), s.get("leased", 0), s.get("provisioning", 0))


def battery_counts(stack: Stack, namespace: str) -> Counts:
    """The counts battery answers GetPool with (a claim in progress counts as leased)."""
    c = stack.battery.store.counts((namespace, "demo"))
    return (c.available, c.leased + c.claiming, c.provisioning)


async def get_pool(stack: Stack, namespace: str) -> dict[str, Any]:
    return dict(
        await asyncio.to_thread(
            stack.custom.get_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            namespace,
            names.POOL_PLURAL,
            "demo",
        )
    )


async def wait_status(stack: Stack, namespace: str, want: Counts, what: str) -> None:
    await asyncio.to_thread(
        wait_for,
        stack,
        names.POOL_PLURAL,
        namespace,
        "demo",
        lambda b: status_counts(b) == want,
        timeout=60,
        what=what,
    )


async def seconds_until(
    stack: Stack, namespace: str, holds: Callable[[Counts], bool], within: float
) -> float | None:
    """Poll the Pool's status counts; seconds until `holds` first held, None if not `within`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < within:
        if holds(status_counts(await get_pool(stack, namespace))):
            return loop.time() - start
        await asyncio.sleep(0.1)
    return None


async def settled_battery(stack: Stack, namespace: str, leased: int) -> Counts:
    """Wait until battery has `leased` Leases on the Pool and nothing provisioning."""
    await stack.battery.wait_for(
        lambda: battery_counts(stack, namespace)[1:] == (leased, 0),
        within=60,
        what=f"battery: Pool demo with {leased} leased and none provisioning",
    )
    return battery_counts(stack, namespace)


async def wait_subscribed(stack: Stack, subscribed: bool, within: float = 30) -> None:
    """/readyz's battery check and the battery_subscribed gauge both say `subscribed`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    want_code, want_check = (200, "[+]battery ok") if subscribed else (503, "[-]battery failed")
    want_gauge = [f"{SUBSCRIBED_METRIC} {1.0 if subscribed else 0.0}"]
    while True:
        code, body = await stack.operator.readyz()
        metrics = await stack.operator.metrics()
        gauge = [line for line in metrics.splitlines() if line.startswith(SUBSCRIBED_METRIC)]
        if code == want_code and want_check in body and gauge == want_gauge:
            return
        assert loop.time() < deadline, f"subscribed is not {subscribed}: /readyz {code} {body!r}"
        await asyncio.sleep(0.2)


def pools_activity(text: str) -> tuple[float, float, float]:
    """(the Pool queue's depth, Pool reconciles, GetPool calls) from the operator's metrics."""
    return (
        exposition.value(text, 'battery_operator_workqueue_depth{controller="pools"}'),
        exposition.total(text, "battery_operator_reconcile_total", controller="pools"),
        exposition.total(text, "battery_operator_battery_call_seconds_count", rpc="GetPool"),
    )


async def wait_pools_idle(stack: Stack, within: float = 30) -> None:
    """Until the operator's Pool controller has nothing queued and has neither reconciled nor
    called GetPool for QUIET_SECONDS."""
    loop = asyncio.get_running_loop()
    last, since = None, loop.time()

    def idle(text: str) -> bool:
        nonlocal last, since
        now = pools_activity(text)
        if now != last:
            last, since = now, loop.time()
            return False
        return now[0] == 0 and loop.time() - since >= QUIET_SECONDS

    await wait_until(stack.operator.metrics, idle, what="the Pool controller idle", within=within)


async def lease_behind_the_operators_back(
    stack: Stack,
    battery: BatteryClient,
    namespace: str,
    *,
    leased: int,
    request_id: str,
    resyncing: bool,
) -> float | None:
    """From a subscribed operator whose Pool status shows battery's settled counts with
    `leased` Leases: end the Events stream, lease one more MicroVM in battery directly, and
    return the seconds until the Pool's status showed it (None: not in `WINDOW_SECONDS`)."""
    before = await settled_battery(stack, namespace, leased=leased)
    await wait_status(stack, namespace, before, f"battery's counts, {leased} leased")
    await wait_subscribed(stack, True)

    stack.battery.drop_event_streams(refuse_new=True)  # open streams end, new ones are refused
    await wait_subscribed(stack, False)
    if not resyncing:
        # Let what the operator had in hand finish (events read before the drop, the reconcile
        # its own status write brings), so only a resync could carry the change below. (An
        # operator that resyncs every second is never idle that long, and needs no wait.)
        await wait_pools_idle(stack)
    assert status_counts(await get_pool(stack, namespace)) == before

    # In battery only: no Kubernetes object changes, and no event reaches the operator.
    ref = PoolRef(namespace, "demo")
    await battery.claim_vm(ref, request_id=request_id)
    assert (await battery.get_pool(ref)).status.leased == leased + 1
    return await seconds_until(stack, namespace, lambda c: c[1] == leased + 1, WINDOW_SECONDS)


@pytest.mark.req("PO-024")
async def test_pools_are_refreshed_on_the_resync_interval_while_events_are_down(
    stack: Stack, namespace: str
) -> None:
    async with BatteryClient.connect(battery_config(stack.battery.target)) as battery:
        try:
            # Control: the same steps under an operator whose resync interval outlasts the
            # test leave the status as it was for the whole window.
            async with operator_with(stack, "--pool-resync-interval=1h"):
                await asyncio.to_thread(ready_pool, stack, namespace)
                seen = await lease_behind_the_operators_back(
                    stack,
                    battery,
                    namespace,
                    leased=0,
                    request_id="po-024-control",
                    resyncing=False,
                )
                assert seen is None, f"with no resync due the status changed after {seen:.1f}s"

            stack.battery.clear_faults()  # the next operator subscribes again
            async with operator_with(stack, f"--pool-resync-interval={RESYNC_SECONDS:g}s"):
                seen = await lease_behind_the_operators_back(
                    stack, battery, namespace, leased=1, request_id="po-024-resync", resyncing=True
                )
                # PO-024: while not subscribed to Events, the Pool is refreshed on the interval.
                assert seen is not None, (
                    f"status still {status_counts(await get_pool(stack, namespace))} "
                    f"{WINDOW_SECONDS}s after battery leased another MicroVM\n"
                    f"--- operator log ---\n{stack.operator.logs()[-5000:]}"
                )
                # Events never came back (the fault stays). Not a one-shot read: /readyz reads
                # the stream's state, the gauge follows it from another task, and under load
                # (a cold CI run) the gauge was read still at 1 just after the stream broke.
                await wait_subscribed(stack, False, within=10)
                # And it keeps following battery to the settled counts.
                after = await settled_battery(stack, namespace, leased=2)
                await wait_status(stack, namespace, after, "battery's counts, 2 leased")
        finally:
            stack.battery.clear_faults()
