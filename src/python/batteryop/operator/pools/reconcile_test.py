"""`reconcile_pool` against the fake battery over fake flintlockd processes, with the real client.

Each test gets its own FakeBattery (in process) on two fake flintlockd Hosts started once per
module, and drives `reconcile_pool` with dict bodies. `operator_env.apply_outcome` has the
runtime's own `Controller.apply` write each Outcome to an in-memory API server. battery calls made by the reconcile are counted by a `CallObserver` on its client; the
test's own calls (waiting for counts, claiming, releasing) go through a second client that is
not observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from batteryop.api import names, samples
from batteryop.api.clock import SYSTEM_CLOCK
from batteryop.api.conditions import (
    Condition,
    ConditionStatus,
    EventReason,
    EventType,
    PoolConditionType,
    PoolReason,
)
from batteryop.api.pool import PoolStatus
from batteryop.battery import (
    BatteryClient,
    BatteryNotFoundError,
    Pool,
    PoolRef,
)
from batteryop.battery import EventType as BatteryEventType
from batteryop.kube.outcome import Outcome
from batteryop.operator.keys import PoolKey
from batteryop.operator.pools.battery_spec import is_drained
from batteryop.operator.pools.demand import Demand
from batteryop.operator.pools.hook_events import hook_failed_event
from batteryop.operator.pools.hosts import HostSet
from batteryop.operator.pools.reconcile import PoolDeps, reconcile_pool
from batteryop.testing.fake_battery import FakeBattery, FakeClock, Timings
from batteryop.testing.fake_kube import merge_patch
from batteryop.testing.operator_env import (
    CallLog,
    apply_outcome,
    battery_config,
    flintlock_hosts,
    pool_body,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

ARCH = "kubernetes.io/arch"
HOSTS = HostSet(
    {
        "host-a": {ARCH: "amd64", names.HOST_LABEL: names.HOST_LABEL_VALUE},
        "host-b": {ARCH: "arm64", names.HOST_LABEL: names.HOST_LABEL_VALUE},
    }
)
WAIT = 15.0  # seconds: bound on waiting for the fake battery to provision
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


# --- fixtures --------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def flintlock_targets() -> AsyncIterator[dict[str, str]]:
    async with flintlock_hosts() as hosts:
        yield {name: host.target for name, host in hosts.items()}


@dataclass
class Env:
    fake: FakeBattery
    ctl: BatteryClient  # the test's own calls, not counted
    calls: CallLog
    deps: PoolDeps
    namespace: str
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    read: dict[str, Any] = field(default_factory=dict)

    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def reconcile(self, body: dict[str, Any]) -> Outcome:
        self.read = body
        return await reconcile_pool(body, self.deps)

    def status_of(self, outcome: Outcome) -> PoolStatus:
        """The status the last reconcile's merge-patch makes of the body it read."""
        assert outcome.status is not None, "the reconcile wrote no status"
        return PoolStatus.from_dict(merge_patch(self.read.get("status") or {}, outcome.status))

    async def wait_pool(self, ref: PoolRef, ok: Callable[[Pool], bool], what: str) -> Pool:
        async def poll() -> Pool:
            while True:
                pool = await self.ctl.get_pool(ref)
                if ok(pool):
                    return pool
                await asyncio.sleep(0.02)

        try:
            return await asyncio.wait_for(poll(), WAIT)
        except TimeoutError:
            pytest.fail(f"timed out after {WAIT}s waiting for {what}")


@pytest_asyncio.fixture(loop_scope="module")
async def env(flintlock_targets: dict[str, str]) -> AsyncIterator[Env]:
    timings = Timings(sweep_interval=1.0, warning_window=3.0, reconcile_interval=10.0)
    async with contextlib.AsyncExitStack() as stack:
        fake = await stack.enter_async_context(
            FakeBattery.start(hosts=flintlock_targets, clock=FakeClock(), timings=timings)
        )
        calls = CallLog()
        client = await stack.enter_async_context(
            BatteryClient.connect(battery_config(fake.target), observer=calls)
        )
        ctl = await stack.enter_async_context(BatteryClient.connect(battery_config(fake.target)))
        clock = FakeClock(T0)
        deps = PoolDeps(battery=client, hosts=HOSTS, clock=clock, demand=Demand(since=T0))
        yield Env(fake, ctl, calls, deps, f"po-{uuid.uuid4().hex[:8]}", clock)


# --- helpers ---------------------------------------------------------------------------------


def ref_of(body: dict[str, Any]) -> PoolRef:
    return PoolRef(namespace=body["metadata"]["namespace"], name=body["metadata"]["name"])


def changed(body: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`body` after a user changed its spec: the API server bumps the generation."""
    out = copy.deepcopy(body)
    out["spec"].update(spec)
    out["metadata"]["generation"] += 1
    return out


def deleted(body: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    return out


def condition(status: PoolStatus, type: PoolConditionType) -> Condition:
    found = status.condition(type)
    assert found is not None, f"no {type} condition"
    return found


def ready(status: PoolStatus) -> tuple[ConditionStatus, str, str]:
    c = condition(status, PoolConditionType.READY)
    return c.status, c.reason, c.message


def exhausted(status: PoolStatus) -> tuple[ConditionStatus, str]:
    c = condition(status, PoolConditionType.EXHAUSTED)
    return c.status, c.reason


async def declared(env: Env, body: dict[str, Any]) -> dict[str, Any]:
    """Create the Pool in battery through one reconcile; return the body as written back."""
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "CreatePool"]
    return await apply_outcome(body, outcome)


async def filled(env: Env, body: dict[str, Any]) -> Pool:
    size = body["spec"]["size"]
    return await env.wait_pool(
        ref_of(body), lambda p: p.status.available == size, f"{size} available MicroVMs"
    )


async def raises_not_found(call: Awaitable[Any]) -> None:
    with pytest.raises(BatteryNotFoundError):
        await call


# --- PO-001 ----------------------------------------------------------------------------------


@pytest.mark.req("PO-001")
async def test_a_new_pool_only_gets_its_finalizer_and_battery_is_not_called(env: Env) -> None:
    body = pool_body(env.namespace, finalizer=False)
    outcome = await env.reconcile(body)
    assert outcome == Outcome(add_finalizer=names.POOL_FINALIZER)
    assert env.calls.take() == []
    await raises_not_found(env.ctl.get_pool(ref_of(body)))

    outcome = await env.reconcile(await apply_outcome(body, outcome))
    assert outcome.add_finalizer is None
    assert env.calls.take() == ["GetPool", "CreatePool"], "created once the finalizer is stored"


# --- declaration, placement, status ----------------------------------------------------------


@pytest.mark.req("PO-002", "PO-010", "PO-020", "PO-021", "PO-022")
async def test_a_pool_is_created_on_the_selected_hosts_and_reports_batterys_counts(
    env: Env,
) -> None:
    body = pool_body(env.namespace, size=2)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "CreatePool"]
    held = await env.ctl.get_pool(ref_of(body))
    assert held.spec.flintlock_hosts == ("host-a",), "only the amd64 Host"
    assert held.spec.size == 2

    status = env.status_of(outcome)
    assert status.observed_generation == 1
    assert (status.available, status.leased, status.provisioning) == (0, 0, 0)
    assert ready(status) == (
        ConditionStatus.FALSE,
        PoolReason.BELOW_SIZE,
        "0 of 2 MicroVMs are available, leased or provisioning",
    )
    assert exhausted(status) == (ConditionStatus.TRUE, PoolReason.NONE_AVAILABLE)
    started = condition(status, PoolConditionType.READY).last_transition_time
    assert started == T0
    assert condition(status, PoolConditionType.READY).observed_generation == 1

    body = await apply_outcome(body, outcome)
    await filled(env, body)
    env.tick(7)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]
    status = env.status_of(outcome)
    assert (status.available, status.leased, status.quarantined) == (2, 0, 0)
    assert ready(status) == (
        ConditionStatus.TRUE,
        PoolReason.AT_SIZE,
        "2 of 2 MicroVMs are available, leased or provisioning",
    )
    assert exhausted(status) == (ConditionStatus.FALSE, PoolReason.AVAILABLE)
    assert condition(status, PoolConditionType.READY).last_transition_time == T0 + timedelta(
        seconds=7
    )
    assert outcome.requeue_after is None


async def test_a_steady_pool_costs_one_get_pool_and_writes_nothing(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    await filled(env, body)
    body = await apply_outcome(body, await env.reconcile(body))
    env.calls.take()

    env.tick(30)
    first = await env.reconcile(body)
    second = await env.reconcile(body)
    assert first == second == Outcome()
    assert env.calls.take() == ["GetPool", "GetPool"]


@pytest.mark.req("PO-002")
async def test_a_size_change_is_sent_with_update_pool_and_observed(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    body = changed(body, size=3)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 3
    status = env.status_of(outcome)
    assert status.observed_generation == 2
    assert ready(status)[2].endswith(" of 3 MicroVMs are available, leased or provisioning")

    await env.reconcile(await apply_outcome(body, outcome))
    assert env.calls.take() == ["GetPool"], "sent once"


@pytest.mark.req("PO-011")
async def test_a_host_set_change_is_sent_with_update_pool(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    env.deps.hosts = HostSet(
        {"host-a": {ARCH: "amd64"}, "host-b": {ARCH: "amd64"}, "host-c": {ARCH: "arm64"}}
    )
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    held = await env.ctl.get_pool(ref_of(body))
    assert held.spec.flintlock_hosts == ("host-a", "host-b")
    body = await apply_outcome(body, outcome)
    assert body["status"]["observedGeneration"] == 1, "same generation, new Hosts"

    await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]


@pytest.mark.req("PO-010", "PO-011", "PO-012")
async def test_a_selector_matching_no_host_is_no_eligible_host_until_one_matches(
    env: Env,
) -> None:
    body = pool_body(env.namespace, size=1, selector={ARCH: "riscv64"})
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "CreatePool"]
    assert (await env.ctl.get_pool(ref_of(body))).spec.flintlock_hosts == ()
    status = env.status_of(outcome)
    assert ready(status) == (
        ConditionStatus.FALSE,
        PoolReason.NO_ELIGIBLE_HOST,
        "No Host matches kubernetes.io/arch=riscv64",
    )
    body = await apply_outcome(body, outcome)

    env.deps.hosts = HostSet({"host-a": {ARCH: "amd64"}, "host-b": {ARCH: "riscv64"}})
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    assert (await env.ctl.get_pool(ref_of(body))).spec.flintlock_hosts == ("host-b",)
    assert ready(env.status_of(outcome))[1] == PoolReason.BELOW_SIZE


@pytest.mark.req("PO-004", "PO-012")
async def test_a_refused_spec_is_rejected_with_batterys_message(env: Env) -> None:
    body = pool_body(env.namespace, size=2, selector={ARCH: "riscv64"})
    body["spec"]["template"]["interfaces"][0]["guestMac"] = "02:00:00:00:00:01"
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "CreatePool"]
    status = env.status_of(outcome)
    state, reason, message = ready(status)
    assert (state, reason) == (ConditionStatus.FALSE, PoolReason.REJECTED), "beats NoEligibleHost"
    assert "guest_mac and static addresses are not allowed" in message
    assert status.observed_generation is None
    assert exhausted(status) == (ConditionStatus.TRUE, PoolReason.NONE_AVAILABLE)
    await raises_not_found(env.ctl.get_pool(ref_of(body)))


@pytest.mark.req("PO-004", "PO-002")
async def test_a_refused_update_keeps_the_accepted_generation_and_batterys_spec(
    env: Env,
) -> None:
    body = await declared(env, pool_body(env.namespace, size=2))
    template = copy.deepcopy(body["spec"]["template"])
    template["interfaces"][0]["guestMac"] = "02:00:00:00:00:01"
    body = changed(body, template=template)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    status = env.status_of(outcome)
    assert status.observed_generation == 1
    assert ready(status)[1] == PoolReason.REJECTED
    held = await env.ctl.get_pool(ref_of(body))
    assert held.spec.template.interfaces[0].guest_mac is None

    await env.reconcile(await apply_outcome(body, outcome))
    assert env.calls.take() == ["GetPool", "UpdatePool"], "sent again until battery takes it"


@pytest.mark.req("PO-101")
async def test_nothing_is_sent_before_the_host_set_is_published(env: Env) -> None:
    env.deps.hosts = None
    body = pool_body(env.namespace, size=1)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]
    status = env.status_of(outcome)
    assert ready(status)[:2] == (ConditionStatus.FALSE, PoolReason.NOT_IN_BATTERY)
    assert "host registry" in ready(status)[2]
    assert status.observed_generation is None
    assert outcome.requeue_after is None


# --- battery unavailable ---------------------------------------------------------------------


async def test_battery_unavailable_keeps_the_status_and_backs_off(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    await filled(env, body)
    body = await apply_outcome(body, await env.reconcile(body))
    before = PoolStatus.from_dict(body["status"])
    env.calls.take()

    env.fake.set_unavailable()
    env.tick(60)
    outcome = await env.reconcile(body)
    status = env.status_of(outcome)
    assert (status.available, status.observed_generation) == (1, 1), "counts kept"
    state, reason, message = ready(status)
    assert (state, reason) == (ConditionStatus.TRUE, PoolReason.AT_SIZE)
    assert "UNAVAILABLE" in message
    ready_before = condition(before, PoolConditionType.READY)
    assert condition(status, PoolConditionType.READY).last_transition_time == (
        ready_before.last_transition_time
    )
    assert condition(status, PoolConditionType.EXHAUSTED) == condition(
        before, PoolConditionType.EXHAUSTED
    )
    assert outcome.backoff, "the work queue's backoff (kube/workqueue_test.py)"
    body = await apply_outcome(body, outcome)
    again = await env.reconcile(body)
    assert again.backoff and again.status is None, "the same message: nothing to write"

    env.fake.set_unavailable(False)
    outcome = await env.reconcile(body)
    assert outcome.requeue_after is None and not outcome.backoff
    assert (
        ready(env.status_of(outcome))[2] == "1 of 1 MicroVMs are available, leased or provisioning"
    )


async def test_battery_unavailable_for_a_new_pool_is_not_in_battery(env: Env) -> None:
    env.fake.set_unavailable()
    outcome = await env.reconcile(pool_body(env.namespace))
    state, reason, message = ready(env.status_of(outcome))
    assert (state, reason) == (ConditionStatus.FALSE, PoolReason.NOT_IN_BATTERY)
    assert "UNAVAILABLE" in message
    assert outcome.backoff


# --- deletion --------------------------------------------------------------------------------


@pytest.mark.req("PO-003", "PO-042", "PO-043", "PO-044")
async def test_deletion_waits_for_the_leased_microvm_on_the_drained_spec(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    ref = ref_of(body)
    await filled(env, body)
    claimed = await env.ctl.claim_vm(ref, request_id=str(uuid.uuid4()))
    body = await apply_outcome(body, await env.reconcile(body))
    env.calls.take()

    body = deleted(body)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["DeletePool", "GetPool", "UpdatePool"]
    assert outcome.remove_finalizer is None and outcome.add_finalizer is None
    held = await env.ctl.get_pool(ref)
    assert is_drained(held.spec), "PO-042: battery replaces nothing meanwhile"
    assert held.spec.flintlock_hosts == ("host-a",)
    status = env.status_of(outcome)
    state, reason, message = ready(status)
    assert (state, reason) == (ConditionStatus.FALSE, PoolReason.DELETION_BLOCKED)
    assert "1 MicroVM is leased" in message
    assert status.leased == 1
    assert outcome.backoff
    body = await apply_outcome(body, outcome)

    outcome = await env.reconcile(body)
    assert env.calls.take() == ["DeletePool", "GetPool"], "drained once"
    assert outcome.remove_finalizer is None
    assert outcome.backoff

    await env.ctl.release_vm(claimed.lease_id)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["DeletePool"]
    assert outcome == Outcome(remove_finalizer=names.POOL_FINALIZER)
    await raises_not_found(env.ctl.get_pool(ref))

    outcome = await env.reconcile(body)
    assert env.calls.take() == ["DeletePool"]
    assert outcome == Outcome(remove_finalizer=names.POOL_FINALIZER), "NotFound also releases"


@pytest.mark.req("PO-044")
async def test_deleting_a_pool_without_leases_removes_it_and_the_finalizer(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=2))
    await filled(env, body)
    outcome = await env.reconcile(deleted(body))
    assert env.calls.take() == ["DeletePool"]
    assert outcome == Outcome(remove_finalizer=names.POOL_FINALIZER)
    await raises_not_found(env.ctl.get_pool(ref_of(body)))
    ref = ref_of(body)
    await env.fake.wait_for(
        lambda: not env.fake.vm_records(ref.namespace, ref.name), what="drained MicroVMs"
    )


async def test_a_deleted_pool_without_the_finalizer_is_left_alone(env: Env) -> None:
    outcome = await env.reconcile(deleted(pool_body(env.namespace, finalizer=False)))
    assert outcome == Outcome()
    assert env.calls.take() == []


@pytest.mark.req("PO-003")
async def test_deletion_with_battery_unavailable_keeps_the_finalizer(env: Env) -> None:
    body = await declared(env, pool_body(env.namespace, size=1))
    env.fake.set_unavailable()
    outcome = await env.reconcile(deleted(body))
    assert outcome.remove_finalizer is None
    assert outcome.backoff
    assert "UNAVAILABLE" in ready(env.status_of(outcome))[2]


# --- PO-041 ----------------------------------------------------------------------------------


@pytest.mark.req("PO-041")
async def test_a_failed_create_hook_becomes_a_hook_failed_warning(env: Env) -> None:
    env.fake.fail_hooks("create", 1)
    body = await declared(env, pool_body(env.namespace, size=1))

    async def first_hook_failure() -> Any:
        async with env.ctl.events(ref_of(body)) as events:
            async for event in events:
                if event.type is BatteryEventType.VM_HOOK_FAILED:
                    return event
        raise AssertionError("the event stream ended")

    event = await asyncio.wait_for(first_hook_failure(), WAIT)
    record = hook_failed_event(event)
    assert record is not None
    assert (record.type, record.reason) == (EventType.WARNING, EventReason.HOOK_FAILED)
    assert event.vm_uid and event.vm_uid in record.message


@pytest.mark.req("PO-102")
async def test_a_change_of_the_ready_reason_is_also_an_event() -> None:

    from batteryop.api.conditions import EventType
    from batteryop.api.pool import Pool, PoolStatus
    from batteryop.operator.pools.ready_event import ready_event
    from batteryop.operator.pools.scope import PoolScope

    def ready(reason: str, status: str) -> dict[str, Any]:
        return {
            "type": "Ready",
            "status": status,
            "reason": reason,
            "message": f"m-{reason}",
            "lastTransitionTime": "2026-11-29T00:00:00Z",
        }

    body = samples.demo_pool(name="p", namespace="ns")
    body["status"] = {"conditions": [ready("BelowSize", "False")]}
    deps = PoolDeps(
        battery=None,  # type: ignore[arg-type]  # the step calls no battery
        hosts=None,
        clock=SYSTEM_CLOCK,
    )

    async def events_for(decided: dict[str, Any]) -> list[tuple[str, str, str]]:
        scope = PoolScope(Pool.from_dict(body), deps, deps.clock.now())
        scope.status = PoolStatus.from_dict(decided)
        await ready_event(scope)
        return [(e.type, e.reason, e.message) for e in scope.outcome.events]

    assert await events_for({"conditions": [ready("BelowSize", "False")]}) == []
    assert await events_for({"conditions": [ready("Rejected", "False")]}) == [
        (EventType.WARNING, "Rejected", "m-Rejected")
    ]
    at_size = await events_for({"conditions": [ready("AtSize", "True")]})
    assert [(t, r) for t, r, _ in at_size] == [(EventType.NORMAL, "AtSize")]


# --- PO-107, PO-108: a Pool that sizes itself --------------------------------------------------


def policy_body(namespace: str, **policy: Any) -> dict[str, Any]:
    """A Pool sized by spec.autoscaling (no spec.size), as the API server returns it, on no
    Host: battery holds its size and boots nothing, so no MicroVM is ever provisioning (the
    policy waits for those, `autoscale_test`) and the sizes are the policy's alone."""
    body = pool_body(namespace, selector={"zone": "none"})
    del body["spec"]["size"]
    body["spec"]["autoscaling"] = {"minIdle": 1, "maxSize": 5, "window": "1m", **policy}
    return body


def arrive(env: Env, body: dict[str, Any], n: int, at: datetime) -> None:
    """`n` claims naming the Pool made at `at`, as `Inputs` records them."""
    key = PoolKey(body["metadata"]["namespace"], body["metadata"]["name"])
    for _ in range(n):
        env.deps.demand.record(key, str(uuid.uuid4()), at)


def sized(env: Env, outcome: Outcome) -> tuple[int | None, str, str]:
    status = env.status_of(outcome)
    c = condition(status, PoolConditionType.AUTOSCALING)
    assert c.status == ConditionStatus.TRUE
    return status.size, c.reason, c.message


def resized(outcome: Outcome) -> list[str]:
    return [e.message for e in outcome.events if e.reason == EventReason.RESIZED]


@pytest.mark.req("PO-107", "PO-108", "RS-108")
async def test_a_pool_with_a_policy_keeps_min_idle_then_follows_the_claim_rate(env: Env) -> None:
    body = policy_body(env.namespace)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "CreatePool"]
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 1
    assert sized(env, outcome) == (1, PoolReason.MIN_IDLE, "minIdle 1")
    assert env.status_of(outcome).last_scale_time == T0
    assert resized(outcome) == ["Resized to 1: minIdle 1"]
    body = await apply_outcome(body, outcome)

    env.tick(5)
    arrive(env, body, 3, T0 + timedelta(seconds=4))
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 3
    assert sized(env, outcome) == (
        3,
        PoolReason.CLAIM_RATE,
        "3 claims made in the last 1m0s (minIdle 1)",
    )
    assert resized(outcome) == ["Resized from 1 to 3: 3 claims made in the last 1m0s (minIdle 1)"]
    # Looked at again when those claims leave the window: 4 s + 60 s after T0, now T0 + 5 s.
    assert outcome.requeue_after == 59.0
    body = await apply_outcome(body, outcome)

    env.deps.demand.waiting = lambda _pool: 1
    outcome = await env.reconcile(body)
    assert sized(env, outcome) == (
        4,
        PoolReason.CLAIMS_WAITING,
        "3 claims made in the last 1m0s (minIdle 1), 1 claim waiting for a MicroVM",
    )
    body = await apply_outcome(body, outcome)

    env.deps.demand.waiting = lambda _pool: 4
    outcome = await env.reconcile(body)
    assert sized(env, outcome)[:2] == (5, PoolReason.MAX_SIZE)
    assert sized(env, outcome)[2].endswith(": 7 wanted, at most maxSize 5")
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 5
    body = await apply_outcome(body, outcome)
    env.calls.take()

    # The claims were served: nothing waits, so 3 would do, but the size stays until a window
    # after its last change (T0 + 5 s).
    env.deps.demand.waiting = lambda _pool: 0
    env.tick(30)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"], "held: nothing sent"
    assert sized(env, outcome) == (
        5,
        PoolReason.HELD,
        "3 wanted (3 claims made in the last 1m0s (minIdle 1)); 5 is kept until a window "
        "after the last change",
    )
    assert outcome.requeue_after == 29.0  # the claims made at T0 + 4 s leave the window
    body = await apply_outcome(body, outcome)

    env.tick(30)  # T0 + 65 s: the claims made at T0 + 4 s are out of the window, and it is a
    # window after the last change
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool", "UpdatePool"]
    assert sized(env, outcome) == (1, PoolReason.MIN_IDLE, "minIdle 1")
    assert resized(outcome) == ["Resized from 5 to 1: minIdle 1"]


@pytest.mark.req("PO-107", "RS-108")
async def test_an_idle_pool_scales_to_zero_and_the_next_claim_scales_it_up(env: Env) -> None:
    body = policy_body(env.namespace, scaleToZeroAfter="2m")
    outcome = await env.reconcile(body)
    assert sized(env, outcome)[0] == 1
    # Looked at again when the idle period would end.
    assert outcome.requeue_after == 120.0
    body = await apply_outcome(body, outcome)

    env.tick(119)
    outcome = await env.reconcile(body)
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 1
    assert outcome.requeue_after == 1.0
    env.tick(1)
    outcome = await env.reconcile(body)
    assert sized(env, outcome) == (0, PoolReason.IDLE, "no claim made or waiting for 2m0s")
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 0
    assert exhausted(env.status_of(outcome)) == (ConditionStatus.FALSE, PoolReason.SIZE_ZERO)
    assert resized(outcome) == ["Resized from 1 to 0: no claim made or waiting for 2m0s"]
    body = await apply_outcome(body, outcome)
    env.calls.take()

    # Going to 0 changed the size, but starts no new idle period: it stays at 0.
    env.tick(5)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]
    assert outcome.status is None or env.status_of(outcome).size == 0
    assert resized(outcome) == []

    # A claim comes: it waits (nothing warm), and is one more MicroVM.
    env.tick(10)
    arrive(env, body, 1, T0 + timedelta(seconds=130))
    env.deps.demand.waiting = lambda _pool: 1
    outcome = await env.reconcile(body)
    assert sized(env, outcome) == (
        2,
        PoolReason.CLAIMS_WAITING,
        "minIdle 1, 1 claim waiting for a MicroVM",
    )
    assert (await env.ctl.get_pool(ref_of(body))).spec.size == 2


@pytest.mark.req("PO-107")
async def test_replace_on_delete_counts_the_leased_microvms_in_the_size(env: Env) -> None:
    body = policy_body(env.namespace, minIdle=2)
    body["spec"]["replenishment"] = {"type": "ReplaceOnDelete"}
    body["status"] = {"leased": 3}
    outcome = await env.reconcile(body)
    assert sized(env, outcome) == (5, PoolReason.MIN_IDLE, "minIdle 2, 3 leased")


@pytest.mark.req("RS-108")
async def test_a_pool_without_a_policy_reports_its_size_and_no_autoscaling_condition(
    env: Env,
) -> None:
    body = pool_body(env.namespace, size=2)
    outcome = await env.reconcile(body)
    status = env.status_of(outcome)
    assert status.size == 2
    assert status.condition(PoolConditionType.AUTOSCALING) is None
    assert status.last_scale_time is None
    assert resized(outcome) == []


@pytest.mark.req("PO-107")
async def test_a_restarted_operator_keeps_the_size_until_it_knows_the_claims_and_a_window_more(
    env: Env,
) -> None:
    body = policy_body(env.namespace, scaleToZeroAfter="2m")
    body = await apply_outcome(body, await env.reconcile(body))
    env.tick(1)
    arrive(env, body, 4, T0 + timedelta(seconds=1))
    outcome = await env.reconcile(body)
    assert sized(env, outcome)[0] == 4
    body = await apply_outcome(body, outcome)
    env.calls.take()

    # The operator restarts two minutes later: the claims were released meanwhile, so it will
    # see none. Until it has listed them, the size stays.
    env.deps.demand = Demand()
    env.tick(120)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]
    assert sized(env, outcome) == (4, PoolReason.HELD, "the operator has not listed the claims yet")

    # Listed (none): neither the 2m idle period nor the shrink counts from before the start,
    # though the last change is two minutes old.
    env.deps.demand.listed(env.clock.now())
    env.tick(10)
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["GetPool"]
    assert sized(env, outcome)[:2] == (4, PoolReason.HELD)
    assert outcome.requeue_after == 50.0
    env.tick(50)
    outcome = await env.reconcile(body)
    assert sized(env, outcome) == (1, PoolReason.MIN_IDLE, "minIdle 1")


@pytest.mark.req("RS-108")
async def test_a_pool_whose_policy_is_removed_keeps_no_autoscaling_condition(env: Env) -> None:
    body = policy_body(env.namespace)
    body = await apply_outcome(body, await env.reconcile(body))
    assert PoolStatus.from_dict(body["status"]).condition(PoolConditionType.AUTOSCALING)
    by_hand = copy.deepcopy(body)
    del by_hand["spec"]["autoscaling"]
    by_hand = changed(by_hand, size=3)
    outcome = await env.reconcile(by_hand)
    assert env.calls.take()[-1] == "UpdatePool"
    status = env.status_of(outcome)
    assert status.size == 3
    assert status.condition(PoolConditionType.AUTOSCALING) is None
    assert status.last_scale_time is None
    assert resized(outcome) == [], "a size set by hand is no Resized Event"
