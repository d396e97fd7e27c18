"""`reconcile_claim` against the fake battery over fake flintlockd processes, with the real client.

Each test gets its own FakeBattery (in process, on a FakeClock that the controller reads too,
sweeping only when a test says so) on fake flintlockd Hosts started once per module. Pools
live in battery on `host-a`. Claims are dict bodies driven in a loop: `Env.step` reconciles a
body and has the runtime's `Controller.apply` write the Outcome (`operator_env.apply_outcome`);
`apply_over` writes it to an API server that holds a newer body than the one read (a cache
behind). The battery calls a reconcile makes are recorded by a `CallLog` on its client; the
test's own calls go through `ctl`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from batteryop.api import names, samples
from batteryop.api.claim import ClaimStatus
from batteryop.api.conditions import (
    MAX_MESSAGE_LENGTH,
    ClaimConditionType,
    ClaimPhase,
    ClaimReason,
    Condition,
    ConditionStatus,
    EventReason,
    EventType,
)
from batteryop.api.pool import Pool
from batteryop.api.times import format_micro_time, format_time
from batteryop.battery import BatteryClient, BatteryUnavailableError, Lease, PoolRef, PoolSpec
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import CLAIMS
from batteryop.kube.workqueue import Answer
from batteryop.operator.claims.bind import EXPIRY_READ_DELAY_SECONDS
from batteryop.operator.claims.cordoned import GIVE_BACKS
from batteryop.operator.claims.expiry import DeletedVMs
from batteryop.operator.claims.lease_checks import LeaseChecks
from batteryop.operator.claims.lease_reads import LeaseReads
from batteryop.operator.claims.reconcile import ClaimDeps, reconcile_claim
from batteryop.operator.claims.slots import ClaimSlots
from batteryop.operator.pools.battery_spec import to_battery_spec
from batteryop.operator.runtime import Controller, key_of
from batteryop.testing.fake_battery import FakeBattery, FakeClock, Timings
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_kube import FakeKube, RecordingRecorder
from batteryop.testing.operator_env import (
    CallLog,
    apply_outcome,
    battery_config,
    flintlock_hosts,
    pool_body,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAIT = 15.0  # seconds: bound on waiting for the fake battery or a Host
HOST = "host-a"
AGENT = "10.0.0.7:10270"
THRESHOLD = 30.0  # the sample Pool's lease expiryThreshold, in seconds
# Sweeps run only when a test calls FakeBattery.sweep(): expiry is then the test's to stage.
TIMINGS = Timings(sweep_interval=3600.0, warning_window=3.0, reconcile_interval=10.0)


# --- fixtures --------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hosts() -> AsyncIterator[dict[str, FakeFlintlockd]]:
    async with flintlock_hosts() as running:
        yield running


@dataclass
class Env:
    fake: FakeBattery
    clock: FakeClock
    battery: BatteryClient  # the reconcile's client, observed by `calls`
    ctl: BatteryClient  # the test's own calls, not observed
    calls: CallLog
    hosts: dict[str, FakeFlintlockd]
    namespace: str
    stack: contextlib.AsyncExitStack
    slots: ClaimSlots = field(default_factory=lambda: ClaimSlots(3))
    deleted: DeletedVMs = field(init=False)
    pools: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    lease_checks: LeaseChecks = field(default_factory=LeaseChecks)
    lease_reads: LeaseReads | None = None
    bind_events: bool = True

    def __post_init__(self) -> None:
        self.deleted = DeletedVMs(self.clock)

    def deps(self, uid: str) -> ClaimDeps:
        return ClaimDeps(
            battery=self.battery,
            pool=lambda namespace, name: self.pools.get((namespace, name)),
            node=self.nodes.get,
            claim_slots=self.slots,
            deleted_vms=self.deleted,
            clock=self.clock,
            lease_checks=self.lease_checks,
            lease_reads=self.lease_reads,
            bind_events=self.bind_events,
        )

    async def reconcile(self, body: dict[str, Any]) -> Outcome:
        """Reconcile `body`, as read from the cache."""
        return await reconcile_claim(body, self.deps(body["metadata"]["uid"]))

    async def step(self, body: dict[str, Any]) -> tuple[Outcome, dict[str, Any]]:
        """One reconcile, and the body after the runtime applied its Outcome."""
        outcome = await self.reconcile(body)
        return outcome, await apply_outcome(body, outcome)

    async def restarted(self) -> Env:
        """The Operator after a restart: new client, slots and memory; same battery and cluster."""
        calls = CallLog()
        client = await self.stack.enter_async_context(
            BatteryClient.connect(battery_config(self.fake.target), observer=calls)
        )
        env = Env(
            self.fake, self.clock, client, self.ctl, calls, self.hosts, self.namespace, self.stack
        )
        env.pools, env.nodes = self.pools, self.nodes
        return env


@pytest_asyncio.fixture(loop_scope="module")
async def env(hosts: dict[str, FakeFlintlockd]) -> AsyncIterator[Env]:
    clock = FakeClock()
    targets = {name: host.target for name, host in hosts.items()}
    async with contextlib.AsyncExitStack() as stack:
        fake = await stack.enter_async_context(
            FakeBattery.start(hosts=targets, clock=clock, timings=TIMINGS)
        )
        calls = CallLog()
        client = await stack.enter_async_context(
            BatteryClient.connect(battery_config(fake.target), observer=calls)
        )
        ctl = await stack.enter_async_context(BatteryClient.connect(battery_config(fake.target)))
        namespace = f"cl-{uuid.uuid4().hex[:8]}"
        env = Env(fake, clock, client, ctl, calls, hosts, namespace, stack)
        env.nodes[HOST] = node_body(HOST, ready="true", reason="Ready", message="all checks pass")
        yield env


# --- helpers ---------------------------------------------------------------------------------


def node_body(name: str, *, address: str | None = AGENT, **report: str) -> dict[str, Any]:
    """A Node with the Exec Agent's report: `ready`, `reason`, `message` annotations."""
    keys = {
        "ready": names.EXEC_AGENT_READY_ANNOTATION,
        "reason": names.EXEC_AGENT_REASON_ANNOTATION,
        "message": names.EXEC_AGENT_MESSAGE_ANNOTATION,
    }
    annotations = {keys[k]: v for k, v in report.items()}
    if address is not None:
        annotations[names.EXEC_AGENT_ADDRESS_ANNOTATION] = address
    return {"metadata": {"name": name, "annotations": annotations}}


async def bounded(what: str, check: Callable[[], Any]) -> Any:
    """Poll the async `check` until it returns something truthy, at most WAIT seconds."""

    async def poll() -> Any:
        while not (result := await check()):
            await asyncio.sleep(0.02)
        return result

    try:
        return await asyncio.wait_for(poll(), WAIT)
    except TimeoutError:
        pytest.fail(f"timed out after {WAIT}s waiting for {what}")


async def add_pool(env: Env, *, name: str = "pool", size: int = 1) -> PoolRef:
    """A Pool in battery on host-a (and its body in the cache), filled to `size`."""
    body = pool_body(env.namespace, name=name, size=size)
    await env.ctl.create_pool(to_battery_spec(Pool.from_dict(body), [HOST]))
    env.pools[(env.namespace, name)] = body
    ref = PoolRef(env.namespace, name)
    await filled(env, ref, size)
    return ref


async def filled(env: Env, ref: PoolRef, available: int) -> None:
    async def check() -> bool:
        return (await env.ctl.get_pool(ref)).status.available >= available

    await bounded(f"{available} available MicroVMs in {ref}", check)


def claim_body(
    env: Env, *, pool: str = "pool", finalizer: bool = True, uid: str | None = None
) -> dict[str, Any]:
    body = samples.sample_claim(
        name=f"claim-{uuid.uuid4().hex[:6]}", pool=pool, namespace=env.namespace
    )
    body["metadata"].update(uid=uid or str(uuid.uuid4()), generation=1, resourceVersion="1")
    if finalizer:
        body["metadata"]["finalizers"] = [names.CLAIM_FINALIZER]
    return body


async def bound_claim(env: Env, **kwargs: Any) -> dict[str, Any]:
    """A claim bound by one reconcile, with battery's expiry recorded by a second."""
    body = claim_body(env, **kwargs)
    _, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    _, body = await env.step(body)
    assert status(body).lease_expires_at is not None
    env.calls.take()
    return body


def status(body: Mapping[str, Any]) -> ClaimStatus:
    return ClaimStatus.from_dict(body.get("status"))


def condition(body: Mapping[str, Any], type: ClaimConditionType) -> Condition:
    found = status(body).condition(type)
    assert found is not None, f"no {type} condition in {body.get('status')}"
    return found


def reason(body: Mapping[str, Any], type: ClaimConditionType) -> tuple[ConditionStatus, str]:
    c = condition(body, type)
    return c.status, c.reason


def assert_pending(body: Mapping[str, Any], bound: str, synced: str = ClaimReason.SYNCED) -> None:
    """The claim is Pending, Bound False for `bound`, and Synced for `synced` (True for SYNCED,
    False for any other reason)."""
    assert status(body).phase is ClaimPhase.PENDING
    assert reason(body, ClaimConditionType.BOUND) == (ConditionStatus.FALSE, bound)
    synced_status = ConditionStatus.TRUE if synced == ClaimReason.SYNCED else ConditionStatus.FALSE
    assert reason(body, ClaimConditionType.SYNCED) == (synced_status, synced)


def events(outcome: Outcome) -> list[tuple[EventType, str]]:
    return [(e.type, e.reason) for e in outcome.events]


def deleting(body: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    return out


def renewed(body: dict[str, Any], when: datetime) -> dict[str, Any]:
    """`body` after the Holder renewed at `when`."""
    out = copy.deepcopy(body)
    out["spec"]["renewTime"] = format_micro_time(when)
    return out


def leases_of(env: Env, uid: str) -> list[Any]:
    """battery's Lease rows made for a claim's uid."""
    return [lease for lease in env.fake.lease_records() if lease.request_id == uid]


async def claim_with_lost_answer(env: Env) -> tuple[Outcome, dict[str, Any], str, Any]:
    """A claim whose first ClaimVM committed a Lease in battery but lost the answer.

    Returns the outcome and body after that reconcile, the claim's uid and battery's Lease.
    """
    env.fake.lose_claim_answers(times=1)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    outcome, body = await env.step(body)
    (committed,) = leases_of(env, uid)  # battery leased it; the answer was lost
    return outcome, body, uid, committed


async def lease(env: Env, body: Mapping[str, Any]) -> Lease | None:
    """The Lease the claim records, as battery lists it now."""
    lease_id = status(body).lease_id
    leases = await env.ctl.list_leases()
    return next((lease for lease in leases if lease.lease_id == lease_id), None)


async def observe_deletion(env: Env, ref: PoolRef, vm_uid: str) -> None:
    """Feed battery's events to `env.deleted` (as the runtime does) until `vm_uid`'s deletion."""

    async def read() -> None:
        async with env.ctl.events(ref) as stream:
            async for event in stream:
                if env.deleted.observe(event) == vm_uid:
                    return

    try:
        await asyncio.wait_for(read(), WAIT)
    except TimeoutError:
        pytest.fail(f"battery reported no deletion of MicroVM {vm_uid}")


# --- CL-001: the finalizer first -------------------------------------------------------------


@pytest.mark.req("CL-001")
async def test_a_new_claim_only_gets_its_finalizer_and_battery_is_not_called(env: Env) -> None:
    await add_pool(env)
    body = claim_body(env, finalizer=False)
    outcome, body = await env.step(body)
    assert outcome == Outcome(add_finalizer=names.CLAIM_FINALIZER)
    assert env.calls.take() == []
    assert env.fake.lease_records() == []

    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"], "claimed once the finalizer is stored"
    assert status(body).phase is ClaimPhase.BOUND


async def apply_over(
    stored: Mapping[str, Any], read: Mapping[str, Any], outcome: Outcome
) -> tuple[Answer, dict[str, Any]]:
    """The runtime's `Controller.apply` writes `outcome`, decided on `read`, to an API server
    holding `stored`; the requeue it returns and what the API server holds after."""
    kube = FakeKube()
    kube.seed(CLAIMS, stored)
    controller = Controller(
        "claims", CLAIMS, _never, kube=kube, recorder=RecordingRecorder(), workers=1
    )
    controller.cache.put(read)
    requeue = await controller.apply(key_of(read), read, outcome)
    return requeue, kube.stored(CLAIMS, read["metadata"]["name"], read["metadata"]["namespace"])


async def _never(body: Mapping[str, Any]) -> Outcome:
    raise AssertionError("only apply runs here")


@pytest.mark.req("CL-002", "CL-008", "CL-061")
async def test_the_binds_status_write_lands_only_on_the_version_the_bind_read(env: Env) -> None:
    # No GET before ClaimVM: the bind decides on the cached body, and the status write that
    # records the Lease carries that body's resourceVersion. Somebody else's change meanwhile
    # (here a label) refuses it; the next reconcile, on the newer body, gets the same Lease
    # back from battery (the claim's uid is the request id) and records it.
    await add_pool(env)
    body = claim_body(env)
    body["metadata"]["resourceVersion"] = "41"
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["ClaimVM"]
    assert outcome.status is not None
    newer = copy.deepcopy(body)
    newer["metadata"].update(resourceVersion="42", labels={"team": "a"})
    requeue, stored = await apply_over(newer, body, outcome)
    assert status(stored).lease_id is None, "the write is refused, nothing recorded"
    assert requeue is not None, "reconciled again even if no event came"

    outcome = await env.reconcile(stored)
    assert env.calls.take() == ["ClaimVM"]
    _, stored = await apply_over(stored, stored, outcome)
    (row,) = leases_of(env, body["metadata"]["uid"])
    assert status(stored).lease_id == row.lease_id, "the same Lease, recorded once"


# --- CL-002, CL-008, CL-060: bind ------------------------------------------------------------


@pytest.mark.req("CL-002", "CL-008", "CL-060", "CL-042")
async def test_bind_records_batterys_answer_and_stops_so_the_status_is_written_next(
    env: Env,
) -> None:
    await add_pool(env)
    renew_at = env.clock.now() - timedelta(seconds=5)
    body = renewed(claim_body(env), renew_at)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    uid = body["metadata"]["uid"]
    (row,) = leases_of(env, uid)  # CL-060: the claim's uid is the request id

    s = status(body)
    assert s.phase is ClaimPhase.BOUND
    assert s.lease_id == row.lease_id  # CL-008: battery's answer to this claim's ClaimVM
    assert s.microvm_uid == row.vm_uid
    assert s.node_name == HOST
    assert s.bound_time == env.clock.now()
    assert s.observed_renew_time == renew_at, "binding is not a renewal"
    assert not _renewal_pending(body)
    assert s.lease_expires_at is None, "the expiry is battery's, read next"
    state, why = reason(body, ClaimConditionType.BOUND)
    assert (state, why) == (ConditionStatus.TRUE, ClaimReason.BOUND)
    message = condition(body, ClaimConditionType.BOUND).message
    assert row.vm_uid in message and HOST in message
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)
    assert condition(body, ClaimConditionType.SYNCED).message == "battery answered ClaimVM"
    assert events(outcome) == [(EventType.NORMAL, ClaimReason.BOUND)]
    # No battery call after ClaimVM; the cache-only steps ride on the same status write.
    assert status(body).agent_address == AGENT
    assert reason(body, ClaimConditionType.AGENT_AVAILABLE)[0] == ConditionStatus.TRUE
    assert outcome.requeue_after == EXPIRY_READ_DELAY_SECONDS

    # The next reconcile reads battery's expiry (CL-016) and the Node report (CL-005).
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    listed = await lease(env, body)
    assert listed is not None
    assert status(body).lease_expires_at == listed.expires_at
    assert outcome.requeue_after == THRESHOLD
    assert status(body).agent_address == AGENT


async def test_with_bind_events_off_the_bind_writes_the_same_and_records_no_event(
    env: Env,
) -> None:
    await add_pool(env)
    env.bind_events = False  # --bind-events=false
    outcome, body = await env.step(claim_body(env))
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).phase is ClaimPhase.BOUND
    assert reason(body, ClaimConditionType.BOUND) == (ConditionStatus.TRUE, ClaimReason.BOUND)
    assert events(outcome) == []


def _renewal_pending(body: Mapping[str, Any]) -> bool:
    spec = body["spec"].get("renewTime")
    return spec != body["status"].get("observedRenewTime")


@pytest.mark.req("CL-002", "CL-008", "CL-061")
async def test_a_cache_behind_a_recorded_lease_never_replaces_it(env: Env) -> None:
    # The API server holds the binding (written by an earlier Operator process whose write
    # landed after this one listed); the cache still has the unbound claim. ClaimVM for the
    # claim's uid answers the Lease it already has, and the write, locked to the old version,
    # is refused: the recorded Lease stays, battery holds one.
    await add_pool(env)
    body = claim_body(env)
    body["metadata"]["resourceVersion"] = "7"
    outcome, written = await env.step(body)
    written["metadata"]["resourceVersion"] = "8"
    env.calls.take()
    outcome = await env.reconcile(body)
    assert env.calls.take() == ["ClaimVM"]
    _, stored = await apply_over(written, body, outcome)
    assert status(stored).lease_id == status(written).lease_id
    assert len(leases_of(env, body["metadata"]["uid"])) == 1


@pytest.mark.req("CL-002", "CL-008")
async def test_two_claims_get_two_microvms(env: Env) -> None:
    await add_pool(env, size=2)
    one = await bound_claim(env)
    two = await bound_claim(env)
    assert status(one).lease_id != status(two).lease_id
    assert status(one).microvm_uid != status(two).microvm_uid


# --- CL-061: a retry gets the same Lease -----------------------------------------------------


@pytest.mark.req("CL-061", "CL-060", "CL-007", "CL-040")
async def test_a_lost_claim_vm_answer_is_retried_into_the_same_lease_and_microvm(
    env: Env,
) -> None:
    ref = await add_pool(env)
    outcome, body, uid, committed = await claim_with_lost_answer(env)
    assert env.calls.take() == ["ClaimVM"]
    assert_pending(body, ClaimReason.BATTERY_UNAVAILABLE, synced=ClaimReason.BATTERY_UNAVAILABLE)
    assert status(body).lease_id is None
    assert outcome.requeue_after == 1.0

    env.clock.advance(1)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).phase is ClaimPhase.BOUND
    assert (status(body).lease_id, status(body).microvm_uid) == (
        committed.lease_id,
        committed.vm_uid,
    )
    assert len(leases_of(env, uid)) == 1, "one MicroVM per claim"
    leased = [vm for vm in env.fake.vm_records(ref.namespace, ref.name) if vm.lease_id]
    assert [vm.uid for vm in leased] == [committed.vm_uid]
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)


@pytest.mark.req("CL-061", "CL-060")
async def test_a_restart_before_the_status_was_written_gets_the_same_lease(env: Env) -> None:
    await add_pool(env)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    lost = await env.reconcile(body)  # the Operator stops before writing this
    assert status(await apply_outcome(body, lost)).phase is ClaimPhase.BOUND

    after = await env.restarted()
    outcome, body = await after.step(body)
    assert after.calls.take() == ["ClaimVM"]
    again = status(body)
    assert (again.lease_id, again.microvm_uid) == (
        status(await apply_outcome(body, lost)).lease_id,
        status(await apply_outcome(body, lost)).microvm_uid,
    )
    assert len(leases_of(env, uid)) == 1, "never a second MicroVM"
    assert events(outcome) == [(EventType.NORMAL, ClaimReason.BOUND)]


# --- Pending: CL-003, CL-004, CL-007, CL-062, CL-063 -----------------------------------------


@pytest.mark.req("CL-003", "CL-042")
async def test_an_exhausted_pool_keeps_the_claim_pending_with_a_growing_wait(env: Env) -> None:
    ref = await add_pool(env, size=0)
    body = claim_body(env)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    assert_pending(body, ClaimReason.POOL_EXHAUSTED)
    assert events(outcome) == [(EventType.WARNING, ClaimReason.POOL_EXHAUSTED)]
    assert outcome.requeue_after == 1.0

    waits = []
    for seconds in (1, 2, 4, 9, 20):
        env.clock.advance(seconds)
        outcome, body = await env.step(body)
        waits.append(outcome.requeue_after)
        assert outcome.events == [], "one Event per reason, not per retry"
    assert waits == [1.0, 3.0, 7.0, 16.0, 30.0]

    held = await env.ctl.get_pool(ref)
    await env.ctl.update_pool(_resized(held.spec, 1))
    await filled(env, ref, 1)
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    assert events(outcome) == [(EventType.NORMAL, ClaimReason.BOUND)]


def _resized(spec: PoolSpec, size: int) -> PoolSpec:
    return replace(spec, size=size)


@pytest.mark.req("CL-063", "CL-004")
async def test_a_deleting_pool_is_never_claimed_from_then_shows_pool_not_found(env: Env) -> None:
    await add_pool(env)
    pool = env.pools[(env.namespace, "pool")]
    pool["metadata"]["deletionTimestamp"] = format_time(env.clock.now())
    body = claim_body(env)
    outcome, body = await env.step(body)
    assert env.calls.take() == [], "no ClaimVM on a Pool being deleted"
    assert status(body).phase is ClaimPhase.PENDING
    assert reason(body, ClaimConditionType.BOUND) == (
        ConditionStatus.FALSE,
        ClaimReason.POOL_DELETING,
    )
    assert events(outcome) == [(EventType.WARNING, ClaimReason.POOL_DELETING)]
    assert outcome.requeue_after == 1.0
    assert status(body).condition(ClaimConditionType.SYNCED) is None, "battery was not called"

    env.clock.advance(4)
    outcome, body = await env.step(body)
    assert outcome.requeue_after == 4.0, "backoff while the Pool is being deleted"
    assert env.calls.take() == []

    del env.pools[(env.namespace, "pool")]
    env.clock.advance(4)
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert reason(body, ClaimConditionType.BOUND) == (
        ConditionStatus.FALSE,
        ClaimReason.POOL_NOT_FOUND,
    )
    assert events(outcome) == [(EventType.WARNING, ClaimReason.POOL_NOT_FOUND)]
    assert outcome.requeue_after == 8.0, "still pending since the first attempt"
    assert env.fake.lease_records() == []


@pytest.mark.req("CL-063", "CL-010")
async def test_a_bound_claim_is_not_affected_by_its_pool_being_deleted(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.pools[(env.namespace, "pool")]["metadata"]["deletionTimestamp"] = format_time(
        env.clock.now()
    )
    env.clock.advance(5)
    outcome, body = await env.step(renewed(body, env.clock.now()))
    assert env.calls.take() == ["Heartbeat"]
    assert status(body).phase is ClaimPhase.BOUND
    assert outcome.events == []


@pytest.mark.req("CL-004", "CL-042")
async def test_a_pool_battery_does_not_hold_is_pool_not_found_with_synced_true(env: Env) -> None:
    env.pools[(env.namespace, "pool")] = pool_body(env.namespace, name="pool")
    body = claim_body(env)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).phase is ClaimPhase.PENDING
    state, why = reason(body, ClaimConditionType.BOUND)
    assert (state, why) == (ConditionStatus.FALSE, ClaimReason.POOL_NOT_FOUND)
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)
    assert outcome.requeue_after == 1.0


@pytest.mark.req("CL-007", "CL-040")
async def test_battery_unavailable_keeps_the_claim_pending_until_it_answers(env: Env) -> None:
    await add_pool(env)
    env.fake.set_unavailable()
    body = claim_body(env)
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.PENDING
    assert reason(body, ClaimConditionType.BOUND)[1] == ClaimReason.BATTERY_UNAVAILABLE
    synced = condition(body, ClaimConditionType.SYNCED)
    assert (synced.status, synced.reason) == (
        ConditionStatus.FALSE,
        ClaimReason.BATTERY_UNAVAILABLE,
    )
    assert "UNAVAILABLE" in synced.message
    assert outcome.requeue_after == 1.0
    assert env.fake.lease_records() == []

    env.fake.set_unavailable(False)
    env.clock.advance(2)
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)


@pytest.mark.req("CL-062", "CL-061", "CL-042")
async def test_claim_aborted_while_the_earlier_lease_is_released_then_a_fresh_claim(
    env: Env,
) -> None:
    ref = await add_pool(env)
    _, body, uid, first = await claim_with_lost_answer(env)
    await filled(env, ref, 1)  # battery topped the Pool up after the claim

    host = env.hosts[HOST]
    await host.go_down()
    try:
        with pytest.raises(BatteryUnavailableError):
            await env.ctl.release_vm(first.lease_id)  # battery keeps the Lease, VM DELETING
        env.calls.take()
        env.clock.advance(1)
        outcome, body = await env.step(body)
        assert env.calls.take() == ["ClaimVM"]
        assert_pending(body, ClaimReason.CLAIM_ABORTED)
        assert events(outcome) == [(EventType.WARNING, ClaimReason.CLAIM_ABORTED)]
        assert outcome.requeue_after == 1.0
    finally:
        await host.come_up()

    async def released() -> bool:
        await env.fake.sweep()
        return not leases_of(env, uid)

    await bounded("battery to finish releasing the first Lease", released)
    env.clock.advance(2)
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    assert status(body).lease_id != first.lease_id
    assert status(body).microvm_uid != first.vm_uid
    assert len(leases_of(env, uid)) == 1


# --- A cordoned Host: CL-103, CL-104 -----------------------------------------------------------


def cordon(env: Env, name: str) -> None:
    """The cached Node of `name` as `kubectl cordon` leaves it."""
    node = copy.deepcopy(env.nodes.get(name) or node_body(name, ready="true", reason="Ready"))
    node["spec"] = {"unschedulable": True}
    env.nodes[name] = node


@pytest.mark.req("CL-103", "CL-002", "CL-060")
async def test_a_microvm_on_a_cordoned_host_is_given_back_and_the_claim_binds_elsewhere(
    env: Env,
) -> None:
    pool = pool_body(env.namespace, size=2)
    await env.ctl.create_pool(to_battery_spec(Pool.from_dict(pool), ["host-a", "host-b"]))
    env.pools[(env.namespace, "pool")] = pool
    await filled(env, PoolRef(env.namespace, "pool"), 2)
    # battery hands out the MicroVM it made first: cordon the Host it runs on.
    first = env.fake.vm_records(env.namespace, "pool")[0]
    cordoned = first.flintlock_host
    other = ({"host-a", "host-b"} - {cordoned}).pop()
    cordon(env, cordoned)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM", "ReleaseVM", "ClaimVM"]
    assert status(body).phase is ClaimPhase.BOUND
    assert status(body).node_name == other
    [lease] = leases_of(env, uid)
    assert lease.lease_id == status(body).lease_id, "the same request id, claimed afresh"
    assert first.uid not in {vm.uid for vm in env.fake.vm_records(env.namespace, "pool")}
    on_host = {vm.spec.uid for vm in await env.hosts[cordoned].list_vms()}
    assert first.uid not in on_host, "given back means destroyed"


@pytest.mark.req("CL-103", "CL-042")
async def test_only_cordoned_hosts_keep_the_claim_pending_until_one_is_uncordoned(
    env: Env,
) -> None:
    ref = await add_pool(env, size=GIVE_BACKS)
    cordon(env, HOST)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM", "ReleaseVM"] * GIVE_BACKS
    assert status(body).phase is ClaimPhase.PENDING
    assert status(body).lease_id is None
    bound = condition(body, ClaimConditionType.BOUND)
    assert (bound.status, bound.reason) == (ConditionStatus.FALSE, ClaimReason.HOST_CORDONED)
    assert f"on cordoned Hosts ({HOST})" in bound.message
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)
    assert events(outcome) == [(EventType.WARNING, ClaimReason.HOST_CORDONED)]
    assert outcome.requeue_after == 1.0
    assert leases_of(env, uid) == [], "every Lease on the cordoned Host was given back"

    env.nodes[HOST] = node_body(HOST, ready="true", reason="Ready")  # uncordoned
    await filled(env, ref, 1)
    env.clock.advance(2)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).phase is ClaimPhase.BOUND


@pytest.mark.req("CL-104", "CL-040", "CL-062")
async def test_a_failed_give_back_keeps_the_claim_pending_and_is_never_bound(env: Env) -> None:
    await add_pool(env)
    cordon(env, HOST)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    host = env.hosts[HOST]
    await host.go_down()  # ReleaseVM answers UNAVAILABLE: battery keeps the Lease
    try:
        outcome, body = await env.step(body)
        assert env.calls.take() == ["ClaimVM", "ReleaseVM"]
        assert_pending(body, ClaimReason.HOST_CORDONED, synced=ClaimReason.BATTERY_UNAVAILABLE)
        assert status(body).lease_id is None
        assert len(leases_of(env, uid)) == 1
        env.clock.advance(2)
        outcome, body = await env.step(body)  # the Lease's MicroVM is being deleted
        assert env.calls.take() == ["ClaimVM"]
        assert reason(body, ClaimConditionType.BOUND)[1] == ClaimReason.CLAIM_ABORTED
        assert status(body).lease_id is None
    finally:
        await host.come_up()


@pytest.mark.req("CL-041")
async def test_another_claim_vm_error_is_battery_error_and_leaves_the_phase(env: Env) -> None:
    await add_pool(env)
    env.fake.fail_hooks("pre_lease", 1)  # battery answers INTERNAL
    body = claim_body(env)
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ClaimVM"]
    assert status(body).phase is None, "phase unchanged"
    assert status(body).condition(ClaimConditionType.BOUND) is None
    synced = condition(body, ClaimConditionType.SYNCED)
    assert (synced.status, synced.reason) == (ConditionStatus.FALSE, ClaimReason.BATTERY_ERROR)
    assert "INTERNAL" in synced.message
    assert events(outcome) == [(EventType.WARNING, ClaimReason.BATTERY_ERROR)]
    assert outcome.requeue_after == 1.0


# --- CL-018: ClaimVM slots -------------------------------------------------------------------


@pytest.mark.req("CL-018")
async def test_with_every_slot_taken_a_bind_waits_but_a_renewal_proceeds(env: Env) -> None:
    await add_pool(env, size=2)
    bound = await bound_claim(env)
    env.slots = ClaimSlots(1, retry_after=0.5)
    with env.slots.try_acquire() as held:
        assert held
        outcome = await env.reconcile(claim_body(env))
        assert outcome == Outcome(requeue_after=0.5), "no ClaimVM, no status change"
        assert env.calls.take() == []
        assert len(env.slots.waiting) == 1, "queued for the next free slot"

        env.clock.advance(3)
        outcome, bound = await env.step(renewed(bound, env.clock.now()))
        assert env.calls.take() == ["Heartbeat"]
        assert status(bound).lease_expires_at == env.clock.now() + timedelta(seconds=THRESHOLD)
    assert env.slots.in_use == 0


@pytest.mark.req("CL-018")
async def test_a_renewal_completes_while_a_slow_claim_vm_is_outstanding(env: Env) -> None:
    await add_pool(env, size=2)
    bound = await bound_claim(env)
    env.slots = ClaimSlots(1)
    env.fake.delay_claims(1.0)
    slow = asyncio.create_task(env.reconcile(claim_body(env)))
    await bounded("ClaimVM to take the only slot", _async(lambda: env.slots.in_use == 1))

    waiting = await env.reconcile(claim_body(env))
    assert waiting.requeue_after == env.slots.retry_after and waiting.status is None
    env.clock.advance(3)
    outcome, bound = await env.step(renewed(bound, env.clock.now()))
    assert not slow.done(), "the renewal did not wait for the ClaimVM"
    assert status(bound).observed_renew_time == env.clock.now()
    env.fake.delay_claims(0)
    assert ClaimStatus.from_dict((await slow).status).phase is ClaimPhase.BOUND
    assert env.slots.in_use == 0


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def run() -> bool:
        return check()

    return run


# --- Renewal: CL-010, CL-011, CL-015, CL-019 -------------------------------------------------


@pytest.mark.req("CL-010", "CL-011", "CL-019", "CL-032")
async def test_a_renewal_writes_batterys_expiry_and_the_relayed_time_in_one_write(
    env: Env,
) -> None:
    await add_pool(env, size=2)
    other = await bound_claim(env)
    body = await bound_claim(env)
    other_before = await lease(env, other)

    env.clock.advance(10)
    renew_at = env.clock.now() - timedelta(microseconds=250)
    outcome, body = await env.step(renewed(body, renew_at))
    assert env.calls.take() == ["Heartbeat"]
    assert outcome.status is not None
    assert set(outcome.status) >= {"leaseExpiresAt", "observedRenewTime"}, "one status write"
    listed = await lease(env, body)
    assert listed is not None and listed.last_heartbeat_at == env.clock.now()
    assert status(body).lease_expires_at == listed.expires_at  # CL-011: battery's, as answered
    assert status(body).observed_renew_time == renew_at
    assert outcome.requeue_after == THRESHOLD  # CL-032
    assert await lease(env, other) == other_before, "CL-019: only the recorded Lease"

    outcome, body = await env.step(body)
    assert env.calls.take() == [], "relayed once"
    assert outcome == Outcome(requeue_after=THRESHOLD)


@pytest.mark.req("CL-015", "CL-040")
async def test_a_heartbeat_failing_in_transit_keeps_the_claim_bound_and_the_renewal_pending(
    env: Env,
) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    expiry = status(body).lease_expires_at
    env.fake.refuse_heartbeats("UNAVAILABLE")
    env.clock.advance(5)
    body = renewed(body, env.clock.now())
    outcome, body = await env.step(body)
    assert env.calls.take() == ["Heartbeat"]
    assert status(body).phase is ClaimPhase.BOUND
    assert status(body).lease_expires_at == expiry
    assert _renewal_pending(body)
    assert reason(body, ClaimConditionType.SYNCED) == (
        ConditionStatus.FALSE,
        ClaimReason.BATTERY_UNAVAILABLE,
    )
    assert outcome.requeue_after == 1.0
    env.clock.advance(3)
    outcome, body = await env.step(body)
    assert outcome.requeue_after == 3.0, "backoff from Synced's transition"

    env.fake.refuse_heartbeats(None)
    outcome, body = await env.step(body)
    assert not _renewal_pending(body)
    assert status(body).lease_expires_at == env.clock.now() + timedelta(seconds=THRESHOLD)
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)


@pytest.mark.req("CL-041")
async def test_a_heartbeat_refused_otherwise_is_battery_error_and_stays_bound(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.fake.refuse_heartbeats("INVALID_ARGUMENT")
    outcome, body = await env.step(renewed(body, env.clock.now()))
    assert status(body).phase is ClaimPhase.BOUND
    assert reason(body, ClaimConditionType.SYNCED) == (
        ConditionStatus.FALSE,
        ClaimReason.BATTERY_ERROR,
    )
    assert outcome.requeue_after == 1.0


@pytest.mark.req("CL-012", "CL-042")
async def test_a_heartbeat_for_a_lease_battery_no_longer_holds_expires_the_claim(
    env: Env,
) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    lease_id = status(body).lease_id
    assert lease_id is not None
    await env.ctl.release_vm(lease_id)
    outcome, body = await env.step(renewed(body, env.clock.now()))
    assert env.calls.take() == ["Heartbeat"]
    assert status(body).phase is ClaimPhase.EXPIRED
    assert reason(body, ClaimConditionType.BOUND) == (
        ConditionStatus.FALSE,
        ClaimReason.LEASE_EXPIRED,
    )
    assert reason(body, ClaimConditionType.SYNCED) == (ConditionStatus.TRUE, ClaimReason.SYNCED)
    assert events(outcome) == [(EventType.WARNING, ClaimReason.LEASE_EXPIRED)]

    outcome, body = await env.step(renewed(body, env.clock.now()))
    assert env.calls.take() == [], "an Expired claim is not renewed"
    assert outcome.status is None


# --- Expiry: CL-012, CL-013, CL-014, CL-016, CL-017, CL-032 ----------------------------------


@pytest.mark.req("CL-032", "CL-016")
async def test_a_steady_bound_claim_calls_nothing_and_is_queued_for_its_expiry(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(12)
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert outcome == Outcome(requeue_after=THRESHOLD - 12)


@pytest.mark.req("CL-014", "CL-016")
async def test_a_lease_listed_with_a_passed_expiry_expires_the_claim(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(THRESHOLD + 1)  # no sweep: battery still lists the Lease
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    assert await lease(env, body) is not None
    assert status(body).phase is ClaimPhase.EXPIRED
    assert reason(body, ClaimConditionType.BOUND)[1] == ClaimReason.LEASE_EXPIRED
    assert events(outcome) == [(EventType.WARNING, ClaimReason.LEASE_EXPIRED)]


def never_aging_reads(env: Env) -> LeaseReads:
    """The operator's shared ListLeases, whose newest answer stays recent for the test."""
    return LeaseReads(env.battery, clock=FakeClock(monotonic_start=0.0))


@pytest.mark.req("CL-016", "CL-012")
async def test_a_lease_the_newest_answer_lists_is_recorded_from_it_without_a_call(
    env: Env,
) -> None:
    env.lease_reads = never_aging_reads(env)
    await add_pool(env, size=3)
    first, second, third = claim_body(env), claim_body(env), claim_body(env)
    _, first = await env.step(first)
    _, second = await env.step(second)
    env.calls.take()
    _, first = await env.step(first)  # its ListLeases lists both Leases
    assert env.calls.take() == ["ListLeases"]
    _, second = await env.step(second)
    assert env.calls.take() == [], "the answer before it listed this Lease"
    listed = await lease(env, second)
    assert listed is not None and status(second).lease_expires_at == listed.expires_at
    # A Lease made after that answer is not in it: its check asks battery (CL-012 is never
    # decided on an answer older than the check).
    _, third = await env.step(third)
    env.calls.take()
    _, third = await env.step(third)
    assert env.calls.take() == ["ListLeases"]
    assert status(third).phase is ClaimPhase.BOUND and status(third).lease_expires_at


@pytest.mark.req("CL-014", "CL-016")
async def test_a_recent_answer_listing_a_passed_expiry_is_asked_again(env: Env) -> None:
    env.lease_reads = never_aging_reads(env)
    await add_pool(env, size=2)
    first, second = claim_body(env), claim_body(env)
    _, first = await env.step(first)
    _, second = await env.step(second)
    _, first = await env.step(first)
    env.calls.take()
    env.clock.advance(THRESHOLD + 1)  # both Leases passed; battery has not swept them
    outcome, second = await env.step(second)
    assert env.calls.take() == ["ListLeases"], "an expiry is only ever decided on a fresh answer"
    assert status(second).phase is ClaimPhase.EXPIRED
    assert events(outcome) == [(EventType.WARNING, ClaimReason.LEASE_EXPIRED)]


@pytest.mark.req("CL-012", "CL-011")
async def test_a_lease_swept_by_battery_expires_the_claim(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(THRESHOLD + 1)
    await env.fake.sweep()
    assert await lease(env, body) is None
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    assert status(body).phase is ClaimPhase.EXPIRED
    assert "no longer holds" in condition(body, ClaimConditionType.BOUND).message


@pytest.mark.req("CL-014", "CL-010")
async def test_a_pending_renewal_is_relayed_rather_than_the_claim_expired(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(THRESHOLD + 1)  # expired in battery, not yet swept
    outcome, body = await env.step(renewed(body, env.clock.now()))
    assert env.calls.take() == ["Heartbeat"], "no ListLeases while a renewal is pending"
    assert status(body).phase is ClaimPhase.BOUND


@pytest.mark.req("CL-017", "CL-040")
async def test_list_leases_failing_in_transit_keeps_the_claim_bound(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(THRESHOLD + 1)
    env.fake.set_unavailable()
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    assert reason(body, ClaimConditionType.SYNCED)[1] == ClaimReason.BATTERY_UNAVAILABLE
    assert outcome.requeue_after == 1.0


def key(body: Mapping[str, Any]) -> tuple[str, str]:
    return (body["metadata"]["namespace"], body["metadata"]["name"])


@pytest.mark.req("CL-030", "CL-012")
async def test_a_claim_due_for_a_lease_check_reads_its_lease_before_its_expiry(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    await env.ctl.release_vm(status(body).lease_id or "")  # battery ended it behind our back
    await env.fake.sweep()
    assert await lease(env, body) is None
    outcome, _ = await env.step(body)
    assert env.calls.take() == [], "not due: nothing before the recorded expiry (CL-032)"

    env.lease_checks.require(key(body))  # battery's Events stream connected again
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    assert status(body).phase is ClaimPhase.EXPIRED
    assert reason(body, ClaimConditionType.BOUND)[1] == ClaimReason.LEASE_EXPIRED
    assert not env.lease_checks.due(key(body))


@pytest.mark.req("CL-030", "CL-016")
async def test_a_lease_check_battery_answers_keeps_the_claim_bound_and_is_done(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.lease_checks.require(key(body))
    outcome, body = await env.step(body)
    assert env.calls.take() == ["ListLeases"]
    assert status(body).phase is ClaimPhase.BOUND
    assert outcome.requeue_after is not None and outcome.requeue_after > 0  # CL-032
    assert not env.lease_checks.due(key(body))
    await env.step(body)
    assert env.calls.take() == [], "checked once, then back to the recorded expiry"


@pytest.mark.req("CL-030", "CL-012")
async def test_claims_marked_together_share_one_list_leases(env: Env) -> None:
    """A restart marks every Bound claim; one ListLeases per Pool answers them all, and a
    Lease battery ended behind our back is missing from it (issue 8: at 10,000 claims a call
    per few claims took 383 s)."""
    await add_pool(env, size=3)
    bodies = [await bound_claim(env) for _ in range(3)]
    await env.ctl.release_vm(status(bodies[2]).lease_id or "")
    await env.fake.sweep()
    for body in bodies:
        env.lease_checks.require(key(body))
    _, first = await env.step(bodies[0])
    assert env.calls.take() == ["ListLeases"]
    _, second = await env.step(bodies[1])
    _, third = await env.step(bodies[2])
    assert env.calls.take() == [], "the first check's answer serves the claims marked before it"
    assert status(first).phase is ClaimPhase.BOUND
    assert status(second).phase is ClaimPhase.BOUND
    assert reason(second, ClaimConditionType.SYNCED)[0] == "True"
    assert status(third).phase is ClaimPhase.EXPIRED
    assert reason(third, ClaimConditionType.BOUND)[1] == ClaimReason.LEASE_EXPIRED
    assert len(env.lease_checks) == 0
    assert env.lease_checks.sizes()["claims:lease_answers"] == 0, "kept only while marked"


@pytest.mark.req("CL-030", "CL-012")
async def test_a_claim_marked_after_a_call_was_asked_for_gets_its_own(env: Env) -> None:
    """An answer serves only marks made before its call: a later mark (a reconnect after it)
    must not read a list that predates it."""
    await add_pool(env, size=3)
    waiting, early, late = [await bound_claim(env) for _ in range(3)]
    env.lease_checks.require(key(waiting))  # stays marked, so the answer is kept
    env.lease_checks.require(key(early))
    await env.step(early)
    assert env.calls.take() == ["ListLeases"]
    env.lease_checks.require(key(late))
    await env.step(late)
    assert env.calls.take() == ["ListLeases"], "the kept answer predates this mark"
    await env.step(waiting)
    assert env.calls.take() == [], "marked before both calls: served by the kept answer"


@pytest.mark.req("CL-030", "CL-017")
async def test_a_lease_check_failing_in_transit_stays_due(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.lease_checks.require(key(body))
    env.fake.set_unavailable()
    outcome, body = await env.step(body)
    assert status(body).phase is ClaimPhase.BOUND
    assert env.lease_checks.due(key(body)), "checked again at the retry"


@pytest.mark.req("CL-013")
async def test_a_deletion_reported_by_events_expires_the_claim_without_calling_battery(
    env: Env,
) -> None:
    ref = await add_pool(env)
    body = await bound_claim(env)
    lease_id, vm = status(body).lease_id, status(body).microvm_uid
    assert lease_id is not None and vm is not None
    await env.ctl.release_vm(lease_id)  # someone else ends the Lease
    await observe_deletion(env, ref, vm)
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert status(body).phase is ClaimPhase.EXPIRED
    assert reason(body, ClaimConditionType.BOUND)[1] == ClaimReason.LEASE_EXPIRED
    assert vm in condition(body, ClaimConditionType.BOUND).message
    assert events(outcome) == [(EventType.WARNING, ClaimReason.LEASE_EXPIRED)]


@pytest.mark.req("CL-013")
async def test_a_deletion_reported_before_the_binding_was_written_still_expires_it(
    env: Env,
) -> None:
    ref = await add_pool(env)
    body = claim_body(env)
    bind = await env.reconcile(body)  # answered; the status write is still on its way
    lease_id = bind.status["leaseID"] if bind.status else None
    vm = bind.status["microVM"]["uid"] if bind.status else None
    assert lease_id and vm
    env.clock.advance(THRESHOLD + 1)
    await env.fake.sweep()  # battery expires it and reports the deletion
    await observe_deletion(env, ref, vm)
    body = await apply_outcome(body, bind)  # the binding lands
    env.calls.take()
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert status(body).phase is ClaimPhase.EXPIRED


# --- Release: CL-020, CL-021, CL-022 ---------------------------------------------------------


@pytest.mark.req("CL-020", "CL-042")
async def test_a_deleted_claim_is_released_and_only_then_loses_its_finalizer(env: Env) -> None:
    ref = await add_pool(env)
    body = await bound_claim(env)
    vm = status(body).microvm_uid
    outcome, body = await env.step(deleting(body))
    assert env.calls.take() == ["ReleaseVM"]
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER
    assert outcome.add_finalizer is None
    assert events(outcome) == [(EventType.NORMAL, EventReason.RELEASED)]
    assert outcome.status is None, "no status write for a claim its finalizer's removal deletes"
    assert await lease(env, body) is None
    assert vm not in {r.uid for r in env.fake.vm_records(ref.namespace, ref.name)}
    assert body["metadata"]["finalizers"] == []
    assert status(body).phase is ClaimPhase.BOUND, "the status is not rewritten as released"


@pytest.mark.req("CL-020")
async def test_a_lease_battery_no_longer_holds_releases_the_finalizer(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.clock.advance(THRESHOLD + 1)
    await env.fake.sweep()
    outcome, body = await env.step(deleting(body))
    assert env.calls.take() == ["ReleaseVM"]
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER
    assert status(body).phase is ClaimPhase.BOUND, "a deleting claim is never expired"


@pytest.mark.req("CL-022", "CL-040")
async def test_a_release_failing_in_transit_keeps_the_finalizer_and_retries(env: Env) -> None:
    await add_pool(env)
    body = deleting(await bound_claim(env))
    host = env.hosts[HOST]
    await host.go_down()
    try:
        outcome, body = await env.step(body)  # battery: UNAVAILABLE "vm cleanup pending"
        assert env.calls.take() == ["ReleaseVM"]
        assert outcome.remove_finalizer is None
        assert names.CLAIM_FINALIZER in body["metadata"]["finalizers"]
        assert reason(body, ClaimConditionType.SYNCED) == (
            ConditionStatus.FALSE,
            ClaimReason.BATTERY_UNAVAILABLE,
        )
        assert outcome.requeue_after == 1.0
        env.clock.advance(6)
        outcome, body = await env.step(body)
        assert outcome.requeue_after == 6.0 and outcome.remove_finalizer is None
        assert await lease(env, body) is not None, "battery keeps the Lease meanwhile"
    finally:
        await host.come_up()

    async def released() -> dict[str, Any] | None:
        nonlocal body
        outcome, body = await env.step(body)
        return body if outcome.remove_finalizer == names.CLAIM_FINALIZER else None

    await bounded("ReleaseVM to succeed once the Host is back", released)
    assert await lease(env, body) is None


@pytest.mark.req("CL-022")
async def test_a_release_while_battery_is_unavailable_keeps_the_finalizer(env: Env) -> None:
    await add_pool(env)
    body = deleting(await bound_claim(env))
    env.fake.set_unavailable()
    outcome, body = await env.step(body)
    assert outcome.remove_finalizer is None
    assert outcome.requeue_after == 1.0
    env.fake.set_unavailable(False)
    outcome, body = await env.step(body)
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER


@pytest.mark.req("CL-021")
async def test_a_deleted_claim_without_a_lease_loses_its_finalizer_without_battery(
    env: Env,
) -> None:
    body = deleting(claim_body(env))
    outcome = await env.reconcile(body)
    assert outcome == Outcome(remove_finalizer=names.CLAIM_FINALIZER)
    assert env.calls.take() == []

    outcome = await env.reconcile(deleting(claim_body(env, finalizer=False)))
    assert outcome == Outcome(), "not ours to release"
    assert env.calls.take() == []


@pytest.mark.req("CL-021", "CL-031", "CL-008")
async def test_a_lease_whose_answer_was_lost_is_never_released_or_adopted(env: Env) -> None:
    await add_pool(env)
    _, body, uid, orphan = await claim_with_lost_answer(env)
    env.calls.take()
    outcome, body = await env.step(deleting(body))
    assert env.calls.take() == [], "no ReleaseVM for a Lease the claim does not record"
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER
    assert status(body).lease_id is None
    assert [lease.lease_id for lease in leases_of(env, uid)] == [
        orphan.lease_id
    ], "battery expires it on its own"


@pytest.mark.req("CL-020", "CL-013")
async def test_a_deleting_claim_whose_microvm_was_reported_deleted_is_released_not_expired(
    env: Env,
) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    vm = status(body).microvm_uid
    assert vm is not None
    env.deleted.record(vm)
    outcome, body = await env.step(deleting(body))
    assert env.calls.take() == ["ReleaseVM"]
    assert status(body).phase is ClaimPhase.BOUND
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER


# --- Node report: CL-005, CL-006, CL-050..CL-053 ---------------------------------------------


@pytest.mark.req("CL-005", "CL-006")
async def test_the_agent_address_follows_the_node_report(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    assert status(body).agent_address == AGENT
    assert reason(body, ClaimConditionType.AGENT_AVAILABLE) == (
        ConditionStatus.TRUE,
        ClaimReason.AGENT_ADDRESS_PUBLISHED,
    )

    env.nodes[HOST] = node_body(HOST, address=None, ready="true", reason="Ready")
    outcome, body = await env.step(body)
    assert env.calls.take() == []
    assert outcome.status is not None and outcome.status["host"] == {"agentAddress": None}
    assert status(body).agent_address is None
    assert status(body).node_name == HOST
    assert status(body).phase is ClaimPhase.BOUND
    assert reason(body, ClaimConditionType.AGENT_AVAILABLE) == (
        ConditionStatus.FALSE,
        ClaimReason.NO_AGENT_ADDRESS,
    )
    assert events(outcome) == [(EventType.WARNING, ClaimReason.NO_AGENT_ADDRESS)]

    env.nodes[HOST] = node_body(HOST, address="10.0.0.8:10270", ready="true")
    outcome, body = await env.step(body)
    assert status(body).agent_address == "10.0.0.8:10270"


@pytest.mark.req("CL-050", "CL-051", "CL-053")
async def test_host_ready_mirrors_the_node_report_and_never_changes_the_phase(env: Env) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    ready = condition(body, ClaimConditionType.HOST_READY)
    assert (ready.status, ready.reason, ready.message) == (
        ConditionStatus.TRUE,
        "Ready",
        "all checks pass",
    )

    env.nodes[HOST] = node_body(HOST, ready="false", reason="KVMUnavailable", message="no kvm")
    outcome, body = await env.step(body)
    gone = condition(body, ClaimConditionType.HOST_READY)
    assert (gone.status, gone.reason, gone.message) == (
        ConditionStatus.FALSE,
        "KVMUnavailable",
        "no kvm",
    )
    assert status(body).phase is ClaimPhase.BOUND
    assert events(outcome) == [(EventType.WARNING, "KVMUnavailable")]

    env.nodes[HOST] = node_body(HOST, ready="True", reason="Ready")  # CL-053: only "true"
    outcome, body = await env.step(body)
    assert reason(body, ClaimConditionType.HOST_READY) == (ConditionStatus.FALSE, "Ready")
    assert outcome.events == []

    env.nodes[HOST] = node_body(HOST, ready="false", reason="not a reason!", message="x" * 40000)
    outcome, body = await env.step(body)
    c = condition(body, ClaimConditionType.HOST_READY)
    assert (c.status, c.reason) == (ConditionStatus.FALSE, ClaimReason.HOST_NOT_READY)
    assert len(c.message) == MAX_MESSAGE_LENGTH

    env.nodes[HOST] = node_body(HOST, ready="true")
    outcome, body = await env.step(body)
    assert reason(body, ClaimConditionType.HOST_READY) == (
        ConditionStatus.TRUE,
        ClaimReason.READY,
    )
    assert events(outcome) == [(EventType.NORMAL, ClaimReason.READY)]
    assert status(body).phase is ClaimPhase.BOUND


@pytest.mark.req("CL-052", "CL-006")
async def test_no_node_or_no_report_is_host_not_ready_and_the_claim_stays_bound(
    env: Env,
) -> None:
    await add_pool(env)
    body = await bound_claim(env)
    env.nodes[HOST] = node_body(HOST, address=AGENT)  # no report annotations
    outcome, body = await env.step(body)
    assert reason(body, ClaimConditionType.HOST_READY) == (
        ConditionStatus.FALSE,
        ClaimReason.NO_NODE_REPORT,
    )
    assert status(body).agent_address == AGENT

    del env.nodes[HOST]
    outcome, body = await env.step(body)
    assert reason(body, ClaimConditionType.HOST_READY) == (
        ConditionStatus.FALSE,
        ClaimReason.NODE_NOT_FOUND,
    )
    assert reason(body, ClaimConditionType.AGENT_AVAILABLE)[1] == ClaimReason.NO_AGENT_ADDRESS
    assert status(body).phase is ClaimPhase.BOUND
    assert env.calls.take() == []


# --- One MicroVM per claim, over a rough life ------------------------------------------------


@pytest.mark.req("CL-061", "CL-008", "CL-020")
async def test_one_claim_holds_one_microvm_through_faults_restarts_and_release(env: Env) -> None:
    ref = await add_pool(env, size=2)
    body = claim_body(env)
    uid = body["metadata"]["uid"]
    env.fake.lose_claim_answers(times=2)
    current = env
    for attempt in range(4):
        if attempt == 2:
            current = await env.restarted()
        env.clock.advance(1)
        _, body = await current.step(body)
        assert len(leases_of(env, uid)) == 1
    assert status(body).phase is ClaimPhase.BOUND
    (row,) = leases_of(env, uid)
    assert status(body).lease_id == row.lease_id
    for _ in range(3):
        env.clock.advance(5)
        _, body = await current.step(renewed(body, env.clock.now()))
    outcome, body = await current.step(deleting(body))
    assert outcome.remove_finalizer == names.CLAIM_FINALIZER
    assert leases_of(env, uid) == []
    assert row.vm_uid not in {r.uid for r in env.fake.vm_records(ref.namespace, ref.name)}
