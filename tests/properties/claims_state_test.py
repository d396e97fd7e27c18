"""Claim invariants under random claims, battery faults and Operator restarts (CL-*).

A hypothesis `RuleBasedStateMachine` models the Operator at the reconcile level:

- the API server is the in-memory `FakeKube` (`ApiServer`): opaque resourceVersions, the
  status subresource and finalizers written locked to the version read, deletion (a
  deletionTimestamp; the body goes once its finalizers are empty), and a watch event per
  change;
- the runtime is `reconcile_claim` plus the runtime's own `Controller` (its `ObjectCache` and
  `apply`, the one implementation of the order of writes), whose watch delivers the API
  server's events only when a rule says so (the cache lags behind), with battery's Events fed
  to `DeletedVMs` by a rule of their own (the watcher may lag too);
- battery is the real `FakeBattery` on a `FakeClock`, one per example, with one Pool of
  `POOL_SIZE` warm MicroVMs on a fake flintlockd Host, reached through the real `BatteryClient`.

Rules, in any order (hypothesis also turns random subsets of them off per example):

- claims: create one (at most `MAX_CLAIMS` live); reconcile one 1-4 times, after the watch
  caught up or from the Operator's cache as it is, the last write possibly left in flight; a write in flight lands; the Holder renews (spec.renewTime); the claim is deleted;
- Operator: its Events watcher delivers battery's outbox; it restarts (writes in flight are
  lost, the bodies survive; new BatteryClient, ClaimSlots, DeletedVMs and cache, relisted);
- battery: lose the next ClaimVM answer; unavailable / available; Heartbeats refused
  UNAVAILABLE or INVALID_ARGUMENT, or accepted; start deleting a leased MicroVM, preferably
  one whose Lease no claim records (the Lease stays until a sweep, so a ClaimVM retried for it
  answers ABORTED, CL-062);
- time: 0.4, 1, 5 or 15 s pass; to just before, or exactly to, the next Lease expiry (the
  status keeps battery's expiry to the second, the clock runs off the whole second); past the
  expiry threshold, with or without a sweep; a sweep alone.

Invariants, after every step:

- at most one claim per MicroVM: no two claims record the same MicroVM uid (CL-008);
- at most one MicroVM per claim: battery never holds two Leases made for one claim (by
  request_id, or by whose reconcile made them), and a recorded lease id is never replaced
  (CL-061);
- a MicroVM whose Lease battery ended is never leased again nor newly recorded by a claim;
- a claim's finalizer goes only once battery no longer holds the Lease it records (CL-020,
  CL-021: an unrecorded Lease of a lost answer stays for battery to expire, CL-031);
- phase Expired only once battery said so: the Lease is gone, listed as expired, or its
  MicroVM's deletion is in battery's Events (CL-011..CL-014);
- a lease id is recorded only from the claim's own ClaimVM: battery's Lease with that id has
  request_id == the claim's uid (CL-008, CL-060), and every Lease battery made came from a
  reconcile of the claim it names;
- ClaimVM only for a claim whose finalizer is stored (CL-001), and, when the API server
  holds the claim as being deleted, only from a read that had not seen the deletion yet (a
  cache behind the API server; the bind guard decides on the body it read);
- a lease id is newly recorded only by a status write locked to the resourceVersion the bind
  read, so it lands on exactly the version the decision rested on (never on a newer one, a
  deleted-and-remade claim of that name, or over a recording that landed late).

CI runs `CI_EXAMPLES` examples; `BATTERYOP_PROPERTIES=full` runs `FULL_EXAMPLES`. The run
prints how many examples and steps it took, and how often the interesting states occurred.

Deterministic by construction, whatever the machine's load: every precondition and choice is
a function of the drawn data and the model (the model's `FakeClock` drives battery, the
Operator's `LeaseReads` and `ClaimSlots`; battery's random lease ids never order a choice), and
every real-time bound (battery calls, battery's calls to flintlockd, waiting for the Pool to
refill) is far above what a step takes, so none decides an outcome. A failure prints its
`@reproduce_failure(...)` line; `BATTERYOP_PROPERTIES_REPRODUCE='<that line>'` replays it:

    BATTERYOP_PROPERTIES_REPRODUCE="@reproduce_failure('6.x', b'...')" \
      ./pants test --force tests/properties:: -- -s

hypothesis drives the machine synchronously; every async call goes through one
`asyncio.Runner` kept for the module, because the fake flintlockd handles (subprocess and
control session) belong to the loop that started them. Each example starts its own FakeBattery
and clients in that loop and closes them in `teardown`.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import contextlib
import copy
import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import pytest
from hypothesis import HealthCheck, reproduce_failure, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.api import names, samples
from batteryop.api.claim import ClaimStatus
from batteryop.api.conditions import ClaimConditionType, ClaimPhase
from batteryop.api.pool import Pool
from batteryop.api.times import format_micro_time, format_time
from batteryop.battery import BatteryClient, BatteryConfig, PoolRef
from batteryop.battery.wire import event_from_pb
from batteryop.kube.errors import ConflictError as KubeConflictError
from batteryop.kube.errors import NotFoundError as KubeNotFoundError
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import CLAIMS, Resource
from batteryop.operator.claims.expiry import DeletedVMs
from batteryop.operator.claims.lease_reads import LeaseReads
from batteryop.operator.claims.reconcile import ClaimDeps, reconcile_claim
from batteryop.operator.claims.slots import ClaimSlots
from batteryop.operator.pools.battery_spec import to_battery_spec
from batteryop.operator.runtime import Controller
from batteryop.testing.fake_battery import FakeBattery, FakeClock, Timings, WaitTimeoutError
from batteryop.testing.fake_battery.store import Phase
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_kube import FakeKube, RecordingRecorder, merge_patch
from batteryop.testing.operator_env import (
    CallLog,
    battery_config,
    flintlock_hosts,
    pool_body,
)

T = TypeVar("T")

FULL: Final = os.environ.get("BATTERYOP_PROPERTIES", "") == "full"
CI_EXAMPLES: Final = 300  # about 30 s here
FULL_EXAMPLES: Final = 2000
STEPS: Final = 60 if FULL else 40  # rules per example, at most
# Real-time bounds, far above what any step takes on a loaded machine: an example must replay
# the same way whatever the load (hypothesis replays examples while it shrinks and refuses a
# test whose draws change), so no deadline may decide an outcome. Only the model's clock does.
WAIT: Final = 120.0  # seconds: bound on waiting for the fake battery to refill the Pool
CALL_TIMEOUT: Final = timedelta(seconds=120)  # the Operator's battery calls
NUDGE: Final = 5.0  # seconds the Pool may stay short before battery is asked for a pass
HOST: Final = "host-a"
POOL: Final = "pool"
POOL_SIZE: Final = 3
MAX_CLAIMS: Final = 4  # live claims at once: more than the Pool's warm MicroVMs
THRESHOLD: Final = 30.0  # the sample Pool's lease expiryThreshold, in seconds
BEFORE: Final = timedelta(milliseconds=200)
# The periodic sweeper never comes due: sweeps run when a rule says so. Fast provisioning.
TIMINGS: Final = Timings(
    sweep_interval=1e7,
    warning_window=3.0,
    reconcile_interval=10.0,
    create_poll_interval=0.01,
    agent_poll_interval=0.01,
    # battery's own real-time deadlines towards flintlockd, as far out as the others.
    create_timeout=WAIT,
    agent_timeout=WAIT,
    agent_probe_timeout=WAIT,
    hook_cleanup_timeout=WAIT,
    delete_timeout=WAIT,
    version_check_timeout=WAIT,
    rpc_timeout=WAIT,
)
DELETION_EVENTS: Final = frozenset(
    {
        types_pb2.VM_DELETED_DUE_TO_EXPIRY,
        types_pb2.VM_DELETED_ON_RELEASE,
        types_pb2.VM_DELETED_ON_POOL_DELETE,
    }
)
PICK = st.integers(min_value=0, max_value=MAX_CLAIMS * 2)
TIME_PASSING: Final = (
    "0.4s pass",  # off the whole second: the status keeps battery's expiry to the second
    "1s pass",
    "5s pass",
    "15s pass",
    "to just before the next Lease expires",
    "to the next Lease expiry",
    "expiry threshold passes",
    "expiry threshold passes, sweep",
    "sweep",
)
RECONCILE_PLAN = st.tuples(PICK, st.integers(1, 4), st.booleans(), st.booleans())
FAULTS: Final = (
    "lose the next ClaimVM answer",
    "battery unavailable",
    "battery available",
    "Heartbeats refused UNAVAILABLE",
    "Heartbeats refused INVALID_ARGUMENT",
    "Heartbeats accepted",
)

REPRODUCE: Final = "BATTERYOP_PROPERTIES_REPRODUCE"
"""Set to the `@reproduce_failure(...)` line a failed run printed to replay that example."""


def reproduce(printed: str) -> Callable[[type[T]], type[T]] | None:
    """The `reproduce_failure` decorator a failed run printed (None for an empty string)."""
    if not printed.strip():
        return None
    found = re.search(r"reproduce_failure\((.+)\)", printed)
    try:
        version, blob = ast.literal_eval(f"({found.group(1)},)") if found else (None, None)
    except (SyntaxError, ValueError):
        version = blob = None
    if not isinstance(version, str) or not isinstance(blob, bytes):
        raise ValueError(
            f"{REPRODUCE} must hold the line a failed run printed, "
            f"@reproduce_failure('<version>', b'<blob>'); got {printed[:80]!r}"
        )
    return reproduce_failure(version, blob)


SETTINGS: Final = settings(
    max_examples=FULL_EXAMPLES if FULL else CI_EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,  # nothing written to the work tree; a failure prints its reproduce blob
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


# --- the module's event loop and Host ----------------------------------------------------------


@dataclass
class Stats:
    """What the run did, printed at the end: examples, steps, and how often things happened."""

    examples: int = 0
    steps: int = 0
    seen: collections.Counter[str] = field(default_factory=collections.Counter)
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> str:
        def listed(rules: bool) -> str:
            return ", ".join(
                f"{k.removeprefix('rule:')}={v}"
                for k, v in sorted(self.seen.items())
                if k.startswith("rule:") == rules
            )

        return (
            f"claims_state: {self.examples} examples, {self.steps} steps in "
            f"{time.monotonic() - self.started:.1f}s ({'full' if FULL else 'ci'} profile)\n"
            f"  rules: {listed(True)}\n  seen: {listed(False)}"
        )


@dataclass
class Harness:
    runner: asyncio.Runner
    hosts: dict[str, FakeFlintlockd]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with asyncio.Runner() as runner:
        stack = contextlib.AsyncExitStack()
        hosts = runner.run(stack.enter_async_context(flintlock_hosts((HOST,))))
        try:
            yield Harness(runner, hosts)
        finally:
            runner.run(stack.aclose())


# --- the API server ----------------------------------------------------------------------------


class ApiServer(FakeKube):
    """MicroVMClaim bodies, as the API server holds them (`FakeKube`), looked up by uid.

    The runtime's writes reach it through `Controller.apply`; `checks` looks at each write
    as it lands (the status write never replaces a recorded lease id; the finalizer goes only
    once battery released the Lease) and counts conflicts and writes to a claim that is gone.
    """

    def __init__(self, checks: ClaimsMachine) -> None:
        super().__init__()
        self.checks = checks

    @property
    def bodies(self) -> dict[str, dict[str, Any]]:
        """Live claims by uid."""
        return {body["metadata"]["uid"]: body for body in self.objects.values()}

    def get(self, uid: str) -> dict[str, Any] | None:  # type: ignore[override]
        body = self.bodies.get(uid)
        return None if body is None else copy.deepcopy(body)

    def add(self, body: dict[str, Any]) -> None:
        self.create(CLAIMS, body)

    def renew(self, uid: str, when: datetime) -> None:
        name = self.checks.names[uid]
        self.patch_now(
            CLAIMS, name, {"spec": {"renewTime": format_micro_time(when)}}, self.checks.namespace
        )

    def remove(self, uid: str, when: datetime) -> None:
        name = self.checks.names[uid]
        self.delete(CLAIMS, name, self.checks.namespace, when=format_time(when))

    def patch_now(
        self,
        res: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        before = copy.deepcopy(
            next((b for b in self.objects.values() if b["metadata"]["name"] == name), None)
        )
        try:
            after = super().patch_now(res, name, patch, namespace, subresource=subresource)
        except KubeConflictError:
            self.checks.stats.seen["write:conflict"] += 1
            raise
        except KubeNotFoundError:
            self.checks.stats.seen["write:gone"] += 1
            raise
        assert before is not None
        uid = before["metadata"]["uid"]
        if subresource == "status":
            self.checks.status_written(uid, before, after, patch)
        lost = set(before["metadata"].get("finalizers") or []) - set(
            after["metadata"].get("finalizers") or []
        )
        if names.CLAIM_FINALIZER in lost:
            self.checks.finalizer_removed(uid, before)
        return after


# --- the Operator ------------------------------------------------------------------------------


@dataclass
class Operator:
    """What an Operator process holds; a restart replaces all of it.

    `claims` is the runtime's own `Controller` (its cache and `apply`), writing to the model's
    API server; `watched` is how far its watch has delivered the API server's events.
    """

    battery: BatteryClient
    calls: CallLog
    deleted_vms: DeletedVMs
    claims: Controller
    lease_reads: LeaseReads
    slots: ClaimSlots
    watched: int = 0
    events_delivered: int = 0  # battery's outbox is replayed whole to a new subscriber

    def cached_uids(self) -> list[str]:
        return [body["metadata"]["uid"] for body in self.claims.cache]


async def _not_reconciled(body: Mapping[str, Any]) -> Outcome:
    raise AssertionError("the machine reconciles; the controller only applies")


@dataclass(frozen=True)
class SeenLease:
    """A Lease as battery first showed it, and the claim whose reconcile made it."""

    lease_id: str
    request_id: str
    vm_uid: str
    owner: str | None


def _status(body: Mapping[str, Any] | None) -> ClaimStatus:
    return ClaimStatus.from_dict(None if body is None else body.get("status"))


def _expires(record: types_pb2.LeaseRecord) -> datetime:
    return record.expires_at.ToDatetime(tzinfo=UTC)


# --- the machine -------------------------------------------------------------------------------


class ClaimsMachine(RuleBasedStateMachine):
    def __init__(self, harness: Harness, stats: Stats) -> None:
        super().__init__()
        self.h = harness
        self.stats = stats
        stats.examples += 1
        # Off the whole second, as real clocks are: battery's expiries then fall between the
        # seconds the status keeps them to.
        self.clock = FakeClock(datetime.now(UTC).replace(microsecond=400_000))
        self.namespace = f"prop-{uuid.uuid4().hex[:8]}"
        self.pool_ref = PoolRef(self.namespace, POOL)
        self.pool_body = pool_body(self.namespace, name=POOL, size=POOL_SIZE)
        self.names: dict[str, str] = {}  # claim uid -> name
        self.inflight: dict[str, tuple[dict[str, Any], Outcome]] = {}
        self.read: dict[str, dict[str, Any]] = {}  # claim uid -> the body its reconcile read
        # battery, as observed after every step that can change it
        self.seen: dict[str, SeenLease] = {}
        self.held: dict[str, types_pb2.LeaseRecord] = {}
        self.ended_vms: set[str] = set()  # MicroVMs whose Lease battery no longer holds
        self.deleted_in_battery: set[str] = set()  # MicroVMs in battery's deletion Events
        self.violations: dict[str, list[str]] = collections.defaultdict(list)
        self.api = ApiServer(self)
        self.stack = contextlib.AsyncExitStack()
        self.fake: FakeBattery
        self.ctl: BatteryClient
        self.op: Operator
        try:
            self.h.run(self._start())
        except BaseException:
            self.h.run(self.stack.aclose())
            raise

    # -- lifecycle ------------------------------------------------------------------------------

    async def _start(self) -> None:
        host = self.h.hosts[HOST]
        self.fake = await self.stack.enter_async_context(
            FakeBattery.start(hosts={HOST: host.target}, clock=self.clock, timings=TIMINGS)
        )
        self.ctl = await self.stack.enter_async_context(BatteryClient.connect(self._config()))
        await self.ctl.create_pool(to_battery_spec(Pool.from_dict(self.pool_body), [HOST]))
        await self._settle()
        self.op = self._new_operator()

    def _new_operator(self) -> Operator:
        calls = CallLog()
        client = BatteryClient.connect(self._config(), observer=calls)
        claims = Controller(
            "claims",
            CLAIMS,
            _not_reconciled,
            kube=self.api,
            recorder=RecordingRecorder(),
            workers=1,
        )
        # ListLeases shared as in the Operator; its newest answer serves for 2 s of the model's
        # time (the parts read the model's clock, never the machine's), so checks after a short
        # time step take a Lease from an earlier answer.
        reads = LeaseReads(client, clock=self.clock)
        slots = ClaimSlots(3, clock=self.clock)
        op = Operator(client, calls, DeletedVMs(self.clock), claims, reads, slots)
        for body in self.api.objects.values():  # its watch starts with a listing
            claims.observe(None, copy.deepcopy(body))
        op.watched = len(self.api.events)
        return op

    def _config(self) -> BatteryConfig:
        return dataclasses.replace(battery_config(self.fake.target), call_timeout=CALL_TIMEOUT)

    def _in_claim_order(
        self, leases: Iterable[types_pb2.LeaseRecord]
    ) -> list[types_pb2.LeaseRecord]:
        """Leases by the claim they were made for, in the order the claims were created, then
        in the order the model first saw them: battery's lease ids are random UUIDs, so their
        order would pick a different Lease each time an example is replayed."""
        claims = {uid: i for i, uid in enumerate(self.names)}
        seen = {lease_id: i for i, lease_id in enumerate(self.seen)}
        return sorted(
            leases,
            key=lambda rec: (claims.get(rec.request_id, len(claims)), seen.get(rec.lease_id, 0)),
        )

    def teardown(self) -> None:
        self.h.run(self._stop())

    async def _stop(self) -> None:
        try:
            await self.op.battery.aclose()
            self.fake.clear_faults()
            # The Host outlives the example: give its MicroVMs back.
            await self.ctl.delete_pool(self.pool_ref, force=True)
        finally:
            await self.stack.aclose()

    async def _settle(self) -> None:
        """Wait until battery refilled the Pool, so every example replays the same way.

        A provision can fail on the machine's time (flintlockd not reached in time when the
        machine is starved); battery tries again at its next tick, which the model's clock may
        never reach. So while the Pool stays short, battery is asked for that pass now, every
        `NUDGE` seconds: a pass only tops the Pool up, which is what the model waits for."""
        key = (self.namespace, POOL)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            try:
                await self.fake.wait_for(
                    lambda: self.fake.store.counts(key).available >= POOL_SIZE,
                    within=min(NUDGE, max(deadline - loop.time(), 0.0)),
                    what=f"{POOL_SIZE} available MicroVMs in {self.pool_ref}",
                )
                return
            except WaitTimeoutError:
                if loop.time() >= deadline:
                    raise
                self.stats.seen["settle:battery asked for another pass"] += 1
                self.fake.schedule.notify(key, "tick")

    def _step(self, what: str) -> None:
        self.stats.steps += 1
        self.stats.seen[f"rule:{what}"] += 1

    # -- observing battery ----------------------------------------------------------------------

    def _observe(self, reconciled: str | None = None) -> None:
        """Read battery's Leases and Events; a new Lease belongs to the claim just reconciled."""
        now_held = {rec.lease_id: rec for rec in self.fake.lease_records()}
        for lease_id, rec in now_held.items():
            if lease_id in self.seen:
                continue
            self.seen[lease_id] = SeenLease(lease_id, rec.request_id, rec.vm_uid, reconciled)
            made = f"battery made Lease {lease_id} on MicroVM {rec.vm_uid} for request_id "
            made += f"{rec.request_id!r}"
            if reconciled is None:
                self.violations["lease_only_from_own_claim_vm"].append(
                    f"{made} outside any claim's reconcile"
                )
                continue
            if rec.request_id != reconciled:  # CL-060
                self.violations["lease_only_from_own_claim_vm"].append(
                    f"{made} in a reconcile of claim {self._name(reconciled)}: the request_id "
                    "is not the claim's uid"
                )
            # CL-001 and the bind guard: reconciles here are atomic, so the API server's body
            # is the one it held while ClaimVM ran.
            stored = self.api.get(reconciled)
            read = self.read.get(reconciled) or {}
            finalizers = [] if stored is None else stored["metadata"].get("finalizers") or []
            if stored is None or names.CLAIM_FINALIZER not in finalizers:
                self.violations["claim_vm_only_for_a_stored_undeleted_claim"].append(
                    f"{made} for claim {self._name(reconciled)}, whose finalizer the API server "
                    f"does not hold (body {'gone' if stored is None else 'present'}, "
                    f"finalizers {finalizers})"
                )
            elif stored["metadata"].get("deletionTimestamp"):
                read_meta = read.get("metadata") or {}
                if read_meta.get("deletionTimestamp") or read_meta.get("resourceVersion") == stored[
                    "metadata"
                ].get("resourceVersion"):
                    self.violations["claim_vm_only_for_a_stored_undeleted_claim"].append(
                        f"{made} for claim {self._name(reconciled)}, read as being deleted "
                        f"(or read at the version that is): since "
                        f"{stored['metadata']['deletionTimestamp']}"
                    )
                else:  # a cache behind the deletion; its locked write cannot record the Lease
                    self.stats.seen["claim_vm:read before the deletion"] += 1
            if rec.vm_uid in self.ended_vms:
                self.violations["released_microvm_never_reused"].append(
                    f"{made} for claim {self._name(reconciled)}, but an earlier Lease on that "
                    f"MicroVM had ended; battery holds: {self._battery_view()}"
                )
        for lease_id in self.held.keys() - now_held.keys():
            self.ended_vms.add(self.seen[lease_id].vm_uid)
        self.held = now_held
        self.deleted_in_battery = {
            e.vm_uid for e in self.fake.events() if e.type in DELETION_EVENTS
        }

    def _battery_view(self) -> str:
        if not self.held:
            return "no Leases"
        now = self.clock.now()
        rows = []
        for rec in self.held.values():
            left = (_expires(rec) - now).total_seconds()
            vm = self.fake.store.vms.get(rec.vm_uid)
            phase = "gone" if vm is None else Phase.Name(vm.phase)
            rows.append(
                f"Lease {rec.lease_id} (request_id {rec.request_id}, MicroVM {rec.vm_uid} "
                f"{phase}, expires in {left:.0f}s)"
            )
        return "; ".join(rows)

    def _name(self, uid: str) -> str:
        return f"{self.namespace}/{self.names.get(uid, '?')} (uid {uid})"

    # -- the runtime ----------------------------------------------------------------------------

    def _deps(self, uid: str) -> ClaimDeps:
        def pool(namespace: str, name: str) -> Mapping[str, Any] | None:
            return self.pool_body if (namespace, name) == (self.namespace, POOL) else None

        return ClaimDeps(
            battery=self.op.battery,
            pool=pool,
            node=lambda name: None,
            claim_slots=self.op.slots,
            deleted_vms=self.op.deleted_vms,
            clock=self.clock,
            lease_reads=self.op.lease_reads,
        )

    async def _reconcile(self, uid: str, caught_up: bool, hold: bool) -> bool:
        """One reconcile of the Operator's cached body; False if the Operator has none."""
        op = self.op
        key = (self.namespace, self.names[uid])
        if caught_up or op.claims.cache.get(key) is None:  # the watch catches up
            op.watched = self.api.deliver(op.watched, op.claims.observe)
        body = op.claims.cache.get(key)
        if body is None:
            return False
        op.calls.take()
        self.read[uid] = copy.deepcopy(body)
        outcome = await reconcile_claim(copy.deepcopy(body), self._deps(uid))
        self._observe(reconciled=uid)
        self._check_decision(uid, body, outcome, op.calls.take())
        if hold:
            self.inflight[uid] = (copy.deepcopy(body), outcome)
        else:
            await self._apply(uid, body, outcome)
        await self._settle()
        return True

    def _check_decision(
        self, uid: str, body: Mapping[str, Any], outcome: Outcome, calls: list[str]
    ) -> None:
        """What a reconcile decided, against what battery held when it decided."""
        before = _status(body)
        status = body.get("status") or {}
        after = ClaimStatus.from_dict(
            merge_patch(status, outcome.status) if outcome.status is not None else status
        )
        for ev in outcome.events:
            self.stats.seen[f"event:{ev.reason}"] += 1
        if after.lease_expires_at not in (None, before.lease_expires_at) and not calls:
            self.stats.seen["expiry:from the newest ListLeases answer, no call"] += 1
        bound = after.condition(ClaimConditionType.BOUND)
        if bound is not None and after.phase is ClaimPhase.PENDING:
            self.stats.seen[f"pending:{bound.reason}"] += 1
        if after.lease_id is not None and after.lease_id != before.lease_id:
            rec = self.held.get(after.lease_id)
            seen = self.seen.get(after.lease_id)
            if (
                rec is None
                or seen is None
                or rec.request_id != uid
                or seen.owner != uid
                or rec.vm_uid != after.microvm_uid
            ):  # CL-008, CL-060
                self.violations["lease_only_from_own_claim_vm"].append(
                    f"claim {self._name(uid)} recorded Lease {after.lease_id} on MicroVM "
                    f"{after.microvm_uid} (made in a reconcile of "
                    f"{'nobody' if seen is None else seen.owner}); battery holds: "
                    f"{self._battery_view()}"
                )
            if after.microvm_uid in self.ended_vms:
                self.violations["released_microvm_never_reused"].append(
                    f"claim {self._name(uid)} newly recorded MicroVM {after.microvm_uid}, whose "
                    f"Lease had ended; battery holds: {self._battery_view()}"
                )
        if after.phase is ClaimPhase.EXPIRED and before.phase is not ClaimPhase.EXPIRED:
            self._check_expired(uid, after, calls)

    def _check_expired(self, uid: str, after: ClaimStatus, calls: list[str]) -> None:
        """CL-011..CL-014: Expired only on battery's word."""
        lease_id, vm = after.lease_id, after.microvm_uid
        rec = None if lease_id is None else self.held.get(lease_id)
        now = self.clock.now()
        said = "/".join(calls) or "Events"
        if rec is None:
            self.stats.seen[f"expired:lease gone ({said})"] += 1
        elif _expires(rec) <= now:
            self.stats.seen[f"expired:listed as expired ({said})"] += 1
        elif vm is not None and vm in self.deleted_in_battery:
            self.stats.seen[f"expired:deletion reported ({said})"] += 1
        else:
            self.violations["expired_only_from_battery"].append(
                f"claim {self._name(uid)} went Expired at {now.isoformat()} although battery "
                f"holds its Lease {lease_id} unexpired and reported no deletion of MicroVM {vm}; "
                f"battery holds: {self._battery_view()}"
            )

    async def _apply(self, uid: str, body: Mapping[str, Any], outcome: Outcome) -> None:
        """The runtime's own `Controller.apply` writes `outcome` (checks: `ApiServer`)."""
        await self.op.claims.apply((self.namespace, self.names[uid]), body, outcome)

    def status_written(
        self,
        uid: str,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        patch: Mapping[str, Any],
    ) -> None:
        """CL-061: a recorded lease id is never replaced; CL-002, CL-008: a lease id is newly
        recorded only by a write locked to the version the bind read (it landed, so that
        version is `before`'s)."""
        recorded = _status(before).lease_id
        if recorded is not None and _status(after).lease_id != recorded:
            self.violations["one_microvm_per_claim"].append(
                f"claim {self._name(uid)} recorded Lease {recorded}, then "
                f"{_status(after).lease_id}; battery holds: {self._battery_view()}"
            )
        if recorded is None and _status(after).lease_id is not None:
            lock = (patch.get("metadata") or {}).get("resourceVersion")
            if lock is None or lock != before["metadata"].get("resourceVersion"):
                self.violations["lease_recorded_on_the_version_read"].append(
                    f"claim {self._name(uid)} recorded Lease {_status(after).lease_id} by a "
                    f"status write locked to {lock!r}, not to the version it landed on"
                )
            else:
                self.stats.seen["status:lease recorded, locked"] += 1

    def finalizer_removed(self, uid: str, stored: Mapping[str, Any] | None) -> None:
        """CL-020, CL-021: the finalizer goes only once battery no longer holds the Lease."""
        self._observe()
        lease_id = _status(stored).lease_id
        if lease_id is not None and lease_id in self.held:
            self.violations["finalizer_only_after_release"].append(
                f"claim {self._name(uid)} lost its finalizer while battery still holds its "
                f"Lease {lease_id}; battery holds: {self._battery_view()}"
            )
        elif lease_id is not None:
            self.stats.seen["released:Lease gone"] += 1
        elif any(r.request_id == uid for r in self.held.values()):
            self.stats.seen["released:no Lease recorded, orphan left to battery"] += 1  # CL-031
        else:
            self.stats.seen["released:no Lease recorded"] += 1  # CL-021

    def _live(self) -> list[str]:
        return list(self.api.bodies)

    def _undeleted(self) -> list[str]:
        return [
            uid
            for uid, body in self.api.bodies.items()
            if not body["metadata"].get("deletionTimestamp")
        ]

    def _reconcilable(self) -> list[str]:
        known = dict.fromkeys([*self.api.bodies, *self.op.cached_uids()])
        return [uid for uid in known if uid not in self.inflight]

    # -- rules: claims --------------------------------------------------------------------------

    @initialize()
    def first_claim(self) -> None:
        self._create()

    @precondition(lambda self: len(self.api.bodies) < MAX_CLAIMS)
    @rule()
    def create_claim(self) -> None:
        self._step("create")
        self._create()

    def _create(self) -> None:
        name = f"claim-{len(self.names)}"
        body = samples.sample_claim(name=name, pool=POOL, namespace=self.namespace)
        uid = str(uuid.uuid4())
        body["metadata"].update(uid=uid, generation=1)
        self.names[uid] = name
        self.api.add(body)

    def _reconcile_rule(self, plan: tuple[int, int, bool, bool]) -> None:
        pick, times, caught_up, hold = plan
        self._step("reconcile")
        candidates = self._reconcilable()
        uid = candidates[pick % len(candidates)]

        async def go() -> None:
            for i in range(times):
                if not await self._reconcile(uid, caught_up, hold and i == times - 1):
                    return

        self.h.run(go())

    # hypothesis has no rule weights, and it draws rules with fewer arguments more often: two
    # rules, one argument each, give reconciles the share a controller's work has.
    @precondition(lambda self: bool(self._reconcilable()))
    @rule(plan=RECONCILE_PLAN)
    def reconcile(self, plan: tuple[int, int, bool, bool]) -> None:
        """Reconcile a claim 1-4 times, from the API server's body (the watch caught up) or
        the Operator's cache; the last write may stay in flight."""
        self._reconcile_rule(plan)

    @precondition(lambda self: bool(self._reconcilable()))
    @rule(plan=RECONCILE_PLAN)
    def reconcile_again(self, plan: tuple[int, int, bool, bool]) -> None:
        self._reconcile_rule(plan)

    @precondition(lambda self: bool(self.inflight))
    @rule(pick=PICK)
    def write_lands(self, pick: int) -> None:
        self._step("write lands")
        uid = list(self.inflight)[pick % len(self.inflight)]
        body, outcome = self.inflight.pop(uid)
        self.h.run(self._apply(uid, body, outcome))

    @precondition(lambda self: bool(self._undeleted()))
    @rule(pick=PICK)
    def holder_renews(self, pick: int) -> None:
        self._step("renew")
        candidates = self._undeleted()
        self.api.renew(candidates[pick % len(candidates)], self.clock.now())

    @precondition(lambda self: bool(self._undeleted()))
    @rule(pick=PICK)
    def delete_claim(self, pick: int) -> None:
        self._step("delete")
        candidates = self._undeleted()
        self.api.remove(candidates[pick % len(candidates)], self.clock.now())

    @rule(action=st.sampled_from(("deliver battery's Events", "restart")))
    def operator(self, action: str) -> None:
        """The Operator's Events watcher catches up with battery's outbox (CL-013); or the
        Operator restarts: writes in flight are lost, the claim bodies survive, a new Operator
        (new BatteryClient, ClaimSlots, DeletedVMs) relists them and its Events watcher gets
        battery's whole outbox again."""
        self._step(action)
        if action == "restart":
            self.inflight.clear()
            self.h.run(self.op.battery.aclose())
            self.op = self._new_operator()
            return
        op = self.op
        events = self.fake.events()
        for event in events[op.events_delivered :]:
            op.deleted_vms.observe(event_from_pb(event))
        op.events_delivered = len(events)

    # -- rules: battery -------------------------------------------------------------------------

    @rule(fault=st.sampled_from(FAULTS))
    def battery_fault(self, fault: str) -> None:
        """Lose the next ClaimVM answer; battery unavailable or available again; Heartbeats
        refused in transit, refused otherwise, or accepted again."""
        self._step(fault)
        if fault == "lose the next ClaimVM answer":
            self.fake.lose_claim_answers(times=1)
        elif fault.startswith("battery "):
            self.fake.set_unavailable(fault == "battery unavailable")
        elif fault == "Heartbeats accepted":
            self.fake.refuse_heartbeats(None)
        else:
            self.fake.refuse_heartbeats(fault.rsplit(" ", 1)[1])

    @rule(passing=st.sampled_from(TIME_PASSING))
    def time_passes(self, passing: str) -> None:
        """A few seconds pass (battery's ticks run), or more than the Lease expiry threshold
        and battery sweeps (its expiry, the only one, CL-011), or battery just sweeps (it
        finishes the deletions it started)."""
        self._step(passing)

        async def go() -> None:
            if passing.startswith("to "):
                # The boundaries: where battery's expiry and the status' copy of it (kept to
                # the second) disagree.
                now = self.clock.now()
                expiries = sorted(_expires(rec) for rec in self.held.values())
                before = passing == "to just before the next Lease expires"
                targets = [e - BEFORE if before else e for e in expiries]
                target = next((t for t in targets if t > now), None)
                if target is not None:
                    await self.fake.advance((target - now).total_seconds())
            elif passing.startswith("expiry threshold passes"):
                await self.fake.advance(THRESHOLD + 1)
            elif passing != "sweep":
                await self.fake.advance(float(passing.removesuffix("s pass")))
            if "sweep" in passing:
                await self.fake.sweep()
            self._observe()
            await self._settle()

        self.h.run(go())

    @precondition(lambda self: bool(self.held))
    @rule(which=st.sampled_from(("unrecorded", "any")), pick=PICK)
    def battery_starts_deleting_a_leased_microvm(self, which: str, pick: int) -> None:
        """As ReleaseVM does before flintlockd confirms: the MicroVM goes DELETING, the Lease
        stays until a sweep finishes the deletion. A ClaimVM retried for an unrecorded Lease
        (its answer was lost) answers ABORTED meanwhile (CL-062); a claim recording the Lease
        learns of its end from battery's Events or Heartbeat/ListLeases (CL-012, CL-013)."""
        self._step(f"start deleting ({which})")
        leases = self._in_claim_order(self.held.values())
        if which == "unrecorded":
            recorded = {_status(body).lease_id for body in self.api.bodies.values()}
            leases = [rec for rec in leases if rec.lease_id not in recorded] or leases
        rec = leases[pick % len(leases)]
        self.fake.store.set_phase(rec.vm_uid, Phase.DELETING)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def one_claim_per_microvm(self) -> None:
        recorded: dict[str, list[str]] = collections.defaultdict(list)
        for uid, body in self.api.bodies.items():
            vm = _status(body).microvm_uid
            if vm is not None:
                recorded[vm].append(self._name(uid))
        shared = {vm: claims for vm, claims in recorded.items() if len(claims) > 1}
        assert not shared, (
            f"MicroVMs recorded by more than one claim: {shared}; battery holds: "
            f"{self._battery_view()}"
        )
        by_vm = collections.Counter(rec.vm_uid for rec in self.held.values())
        doubled = [vm for vm, n in by_vm.items() if n > 1]
        assert not doubled, f"battery leases MicroVMs {doubled} twice: {self._battery_view()}"

    @invariant()
    def one_microvm_per_claim(self) -> None:
        """CL-061: never two Leases for one claim, by request_id or by the reconcile that made
        them; a recorded lease id is never replaced."""
        found = self.violations.get("one_microvm_per_claim")
        assert not found, "\n".join(found or [])
        for key, label in ((lambda s: s.request_id, "request_id"), (lambda s: s.owner, "owner")):
            groups: dict[str | None, list[str]] = collections.defaultdict(list)
            for lease_id in self.held:
                groups[key(self.seen[lease_id])].append(lease_id)
            for claim, leases in groups.items():
                assert claim is None or len(leases) <= 1, (
                    f"claim {self._name(claim)} has {len(leases)} Leases in battery (by "
                    f"{label}): {leases}; battery holds: {self._battery_view()}"
                )

    @invariant()
    def released_microvm_never_reused(self) -> None:
        reused = [rec for rec in self.held.values() if rec.vm_uid in self.ended_vms]
        assert (
            not reused
        ), f"battery leases again a MicroVM whose Lease had ended: {self._battery_view()}"
        found = self.violations.get("released_microvm_never_reused")
        assert not found, "\n".join(found or [])

    @invariant()
    def finalizer_only_after_release(self) -> None:
        found = self.violations.get("finalizer_only_after_release")
        assert not found, "\n".join(found or [])
        for uid, body in self.api.bodies.items():
            lease_id = _status(body).lease_id
            if lease_id in self.held:
                assert names.CLAIM_FINALIZER in (body["metadata"].get("finalizers") or []), (
                    f"claim {self._name(uid)} records Lease {lease_id}, which battery holds, "
                    f"without its finalizer; battery holds: {self._battery_view()}"
                )

    @invariant()
    def expired_only_from_battery(self) -> None:
        found = self.violations.get("expired_only_from_battery")
        assert not found, "\n".join(found or [])

    @invariant()
    def claim_vm_only_for_a_stored_undeleted_claim(self) -> None:
        """CL-001: every Lease battery makes is covered by a stored finalizer; and ClaimVM
        for a claim being deleted comes only from a read older than the deletion."""
        found = self.violations.get("claim_vm_only_for_a_stored_undeleted_claim")
        assert not found, "\n".join(found or [])

    @invariant()
    def lease_recorded_on_the_version_read(self) -> None:
        """The bind's status write lands only on the version its decision read (CL-002)."""
        found = self.violations.get("lease_recorded_on_the_version_read")
        assert not found, "\n".join(found or [])

    @invariant()
    def lease_only_from_own_claim_vm(self) -> None:
        found = self.violations.get("lease_only_from_own_claim_vm")
        assert not found, "\n".join(found or [])
        for uid, body in self.api.bodies.items():
            status = _status(body)
            if status.lease_id is None:
                continue
            seen = self.seen.get(status.lease_id)
            assert (
                seen is not None
                and seen.request_id == uid
                and seen.owner == uid
                and seen.vm_uid == status.microvm_uid
            ), (
                f"claim {self._name(uid)} records Lease {status.lease_id} on MicroVM "
                f"{status.microvm_uid}, but battery made that Lease as {seen}; battery holds: "
                f"{self._battery_view()}"
            )


@pytest.mark.req(
    "CL-001",
    "CL-008",
    "CL-011",
    "CL-012",
    "CL-013",
    "CL-014",
    "CL-020",
    "CL-021",
    "CL-031",
    "CL-060",
    "CL-061",
    "CL-062",
    "TD-101",
    "TD-102",
    "TD-103",
    "TD-104",
    "TD-105",
)
def test_claim_invariants_hold_through_faults_restarts_and_stale_reads(harness: Harness) -> None:
    stats = Stats()

    class Run(ClaimsMachine):
        def __init__(self) -> None:
            super().__init__(harness, stats)

    replay = reproduce(os.environ.get(REPRODUCE, ""))
    try:
        run_state_machine_as_test(Run if replay is None else replay(Run), settings=SETTINGS)
    finally:
        print(f"\n{stats.summary()}")
