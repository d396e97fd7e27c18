from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from batteryop.api import names, samples
from batteryop.api.clock import FakeClock
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig
from batteryop.battery.models import Event, EventType, PoolRef
from batteryop.battery.observer import CallObserver
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.obs.exported.operator import NAMESPACE
from batteryop.obs.metrics import OperatorMetrics
from batteryop.operator.app import Operator
from batteryop.operator.claims.waiters import HOLD_SECONDS, Waiters
from batteryop.operator.config import parse
from batteryop.operator.inputs import POOL_EVENT_COALESCE_SECONDS
from batteryop.operator.keys import PoolKey
from batteryop.operator.pools.hosts import HostSet


def claim(name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "MicroVMClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": {"poolRef": {"name": "warm"}},
    }


@contextlib.asynccontextmanager
async def offline_operator(
    metrics: OperatorMetrics | None = None, observer: CallObserver | None = None
) -> AsyncIterator[Operator]:
    """An Operator whose API server and battery are unreachable (calls to them fail)."""
    kube_config = KubeConfig(server="http://127.0.0.1:9", ca_data=None)
    kube = KubeClient(kube_config)
    battery = BatteryClient.connect(
        BatteryConfig(target="127.0.0.1:9", call_timeout=timedelta(seconds=1)),
        observer=observer,
    )
    try:
        yield Operator(
            parse([]), kube=kube, kube_config=kube_config, battery=battery, metrics=metrics
        )
    finally:
        await battery.aclose()
        await kube.aclose()


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}}


@pytest.mark.req("PO-010", "PO-011", "PO-101")
async def test_the_host_set_is_unknown_until_every_node_is_listed() -> None:
    async with offline_operator() as operator:
        published = {names.HOSTS_ANNOTATION: json.dumps(["host-a", "host-b"])}
        operator.inputs.on_battery_config({"metadata": {"annotations": published}})
        operator.inputs.on_node("ADDED", node("host-a", zone="a"))  # an event before the list ended
        # Not "host-a only": a Pool reconciled now keeps the Hosts battery already holds.
        assert operator.pool_deps.hosts is None
        operator.inputs.on_nodes_listed([node("host-a", zone="a"), node("host-b", zone="b")])
        assert operator.pool_deps.hosts == HostSet(
            {"host-a": {"zone": "a"}, "host-b": {"zone": "b"}}
        )
        # A later list (after a watch failure) drops a Node deleted meanwhile.
        operator.inputs.on_nodes_listed([node("host-a", zone="a")])
        assert operator.pool_deps.hosts == HostSet({"host-a": {"zone": "a"}})


@pytest.mark.req("CL-013")
async def test_a_relist_forgets_a_claim_whose_deleted_event_was_missed() -> None:
    # A watch that ends in 410 Gone is followed by a fresh list; a claim deleted meanwhile is
    # simply absent from it, and must leave every cache and index as a DELETED event would.
    async with offline_operator() as operator:
        kept, gone = on_node("c1", "vm-1", "host-a"), on_node("c2", "vm-2", "host-a")
        operator.inputs.on_claims_listed([kept, gone])
        assert operator.inputs.claims_holding("vm-2") == [("ns", "c2")]
        assert operator.lease_checks.due(("ns", "c2"))  # listed Bound: checked (CL-030)
        operator.inputs.on_claims_listed([kept])
        assert operator.claims.cache.get(("ns", "c2")) is None
        assert operator.inputs.claims_holding("vm-2") == []
        assert not operator.lease_checks.due(("ns", "c2"))
        assert operator.claims.cache.get(("ns", "c1")) is not None


async def test_a_relist_forgets_a_pool_whose_deleted_event_was_missed() -> None:
    async with offline_operator() as operator:
        pool = samples.sample_pool(name="p", namespace="ns")
        pool["metadata"].update(uid="u-p", resourceVersion="1")
        operator.inputs.on_pools_listed([pool])
        assert operator.pools.cache.get(("ns", "p")) is not None
        operator.inputs.on_pools_listed([])
        assert operator.pools.cache.get(("ns", "p")) is None


async def test_claim_reconciles_share_one_lease_reader() -> None:
    async with offline_operator() as operator:  # CL-016: ListLeases shared per Pool
        # One ClaimDeps serves every claim reconcile (no per-claim state left in it).
        assert operator.claim_deps.lease_reads is operator.lease_reads


def with_phase(body: dict[str, object], phase: str, rv: str) -> dict[str, Any]:
    meta = dict(body["metadata"])  # type: ignore[call-overload]
    return {**body, "metadata": {**meta, "resourceVersion": rv}, "status": {"phase": phase}}


async def test_claims_are_counted_by_phase_as_their_phases_change() -> None:
    registry = CollectorRegistry()

    def count(phase: str) -> float | None:
        return registry.get_sample_value(f"{NAMESPACE}_claims_by_phase", {"phase": phase})

    async with offline_operator(OperatorMetrics(registry)) as operator:
        operator.inputs.on_claim("ADDED", with_phase(claim("a"), "Pending", "1"))
        operator.inputs.on_claim("ADDED", with_phase(claim("b"), "Pending", "2"))
        assert (count("Pending"), count("Bound")) == (2, 0)
        operator.inputs.on_claim("MODIFIED", with_phase(claim("a"), "Bound", "3"))
        operator.inputs.on_claim(
            "MODIFIED", with_phase(claim("a"), "Bound", "4")
        )  # unchanged phase
        assert (count("Pending"), count("Bound")) == (1, 1)
        operator.inputs.on_claim("DELETED", with_phase(claim("a"), "Bound", "5"))
        operator.inputs.on_claim("DELETED", with_phase(claim("b"), "Pending", "6"))
        assert (count("Pending"), count("Bound")) == (0, 0)


def pool(name: str, rv: str, exhausted: str | None) -> dict[str, Any]:
    conditions = [] if exhausted is None else [{"type": "Exhausted", "status": exhausted}]
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "Pool",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"size": 1},
        "status": {"conditions": conditions},
    }


def host(name: str, rv: str, ready: str | None) -> dict[str, Any]:
    body = node(name, **{names.HOST_LABEL: names.HOST_LABEL_VALUE})
    body["metadata"]["resourceVersion"] = rv
    if ready is not None:
        body["metadata"]["annotations"] = {names.EXEC_AGENT_READY_ANNOTATION: ready}
    return body


@pytest.mark.req("DP-108", "CL-105")
async def test_the_alerting_gauges_read_the_caches_at_each_scrape() -> None:
    """What the alerts of `manifests/alerts.py` read: Pools exhausted, Hosts not ready, and
    how long the oldest claim has waited to be Bound."""
    registry = CollectorRegistry()

    def value(name: str) -> float | None:
        return registry.get_sample_value(f"{NAMESPACE}_{name}")

    async with offline_operator(OperatorMetrics(registry)) as operator:
        assert (value("pools_exhausted"), value("hosts_not_ready")) == (0, 0)
        assert value("claim_pending_oldest_seconds") == 0
        operator.inputs.on_pool("ADDED", pool("a", "1", "True"))
        operator.inputs.on_pool("ADDED", pool("b", "2", "False"))
        operator.inputs.on_pool("ADDED", pool("c", "3", None))
        assert value("pools_exhausted") == 1
        operator.inputs.on_pool("MODIFIED", pool("b", "4", "True"))
        assert value("pools_exhausted") == 2
        operator.inputs.on_pool("DELETED", pool("a", "5", "True"))
        assert value("pools_exhausted") == 1

        operator.inputs.on_node("ADDED", host("h1", "1", "true"))
        operator.inputs.on_node("ADDED", host("h2", "2", "false"))
        operator.inputs.on_node("ADDED", host("h3", "3", None))  # no report yet: not ready
        operator.inputs.on_node("ADDED", node("other"))  # not a Host
        assert value("hosts_not_ready") == 2
        operator.inputs.on_node("MODIFIED", host("h2", "5", "true"))
        assert value("hosts_not_ready") == 1
        # CL-105: a ready report on a Node that is not Ready itself does not count as ready.
        down = host("h1", "6", "true")
        down["status"] = {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        operator.inputs.on_node("MODIFIED", down)
        assert value("hosts_not_ready") == 2

        # The age itself is claim_metrics_test's (an injected clock); here, that it is wired.
        operator.claim_metrics.clock = clock = FakeClock()
        operator.inputs.on_claim("ADDED", with_phase(claim("a"), "Pending", "1"))
        clock.advance(12.5)
        assert value("claim_pending_oldest_seconds") == 12.5
        operator.inputs.on_claim("MODIFIED", with_phase(claim("a"), "Bound", "2"))
        assert value("claim_pending_oldest_seconds") == 0


class SwitchedStream:
    """battery's Events stream, subscribed or not as the test says, and no events at all."""

    def __init__(self) -> None:
        self.generation = 0
        self._subscribed = asyncio.Event()
        self._unsubscribed = asyncio.Event()
        self._unsubscribed.set()
        self._closed = asyncio.Event()

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    def connect(self) -> None:
        self.generation += 1
        self._unsubscribed.clear()
        self._subscribed.set()

    def disconnect(self) -> None:
        self._subscribed.clear()
        self._unsubscribed.set()

    def start(self) -> None:
        pass

    async def wait_subscribed(self) -> None:
        await self._subscribed.wait()

    async def wait_unsubscribed(self) -> None:
        await self._unsubscribed.wait()

    def __aiter__(self) -> SwitchedStream:
        return self

    async def __anext__(self) -> Event:
        await self._closed.wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._closed.set()


class ListLeasesCalled:
    """A battery `CallObserver` that says when ListLeases was called (answered or not)."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    def on_call(self, rpc: str, code: str, seconds: float) -> None:
        if rpc == "ListLeases":
            self.called.set()


def bound_claim(name: str, expires_in: timedelta) -> dict[str, Any]:
    body: dict[str, Any] = samples.sample_claim(name=name, pool="warm", namespace="ns")
    body["metadata"].update(uid=f"uid-{name}", resourceVersion="1", generation=1)
    body["metadata"]["finalizers"] = [names.CLAIM_FINALIZER]
    expires = (datetime.now(UTC) + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["status"] = {
        "phase": "Bound",
        "leaseID": f"lease-{name}",
        "microVM": {"uid": f"vm-{name}"},
        "host": {"nodeName": "host-a"},
        "leaseExpiresAt": expires,
    }
    return body


@pytest.mark.req("CL-030")
async def test_on_battery_reconnect_a_bound_claim_reads_its_lease_even_before_its_expiry() -> None:
    # battery may have lost or ended the Lease while we were apart; nothing else would look
    # before the recorded expiry, an hour away, and no battery event needs to come first.
    calls = ListLeasesCalled()
    async with offline_operator(observer=calls) as operator:
        stream = SwitchedStream()
        operator.stream = stream
        stream.connect()
        await operator.start()
        try:
            operator.inputs.on_claim("ADDED", bound_claim("c1", timedelta(hours=1)))
            stream.disconnect()
            stream.connect()  # reconnected; battery replays nothing new
            await asyncio.wait_for(calls.called.wait(), timeout=10)
        finally:
            await operator.stop()


async def test_a_deleted_claim_leaves_no_lease_check_and_no_place_among_the_claim_vm_waiters() -> (
    None
):
    async with offline_operator() as operator:
        body = bound_claim("c1", timedelta(hours=1))
        operator.inputs.on_claim(None, body)  # listed at start: its Lease is read at once (CL-030)
        key = ("ns", "c1")
        assert operator.lease_checks.due(key)
        with contextlib.ExitStack() as taken:  # every ClaimVM slot busy
            for _ in range(operator.claim_slots.limit):
                assert taken.enter_context(operator.claim_slots.try_acquire())
            assert operator.claim_slots.queue_if_full(key)
            assert key in operator.claim_slots.waiting
            operator.inputs.on_claim("DELETED", body)
            assert not operator.lease_checks.due(key)
            assert key not in operator.claim_slots.waiting
        # The queues (not running here) still hold the keys: a deleted key leaves its queue
        # when its turn comes and the reconcile finds no body.
        assert {k: v for k, v in operator.sizes().items() if v and ":queue:" not in k} == {}


def on_node(name: str, vm: str, node: str) -> dict[str, Any]:
    body = bound_claim(name, timedelta(hours=1))
    body["status"]["microVM"]["uid"] = vm
    body["status"]["host"]["nodeName"] = node
    return body


@pytest.mark.req("CL-013", "CL-050")
async def test_a_battery_event_and_a_node_change_queue_only_the_claims_they_concern() -> None:
    async with offline_operator() as operator:
        for i in range(50):  # claims the inputs must not walk
            operator.inputs.on_claim("ADDED", on_node(f"other-{i}", f"vm-other-{i}", "host-b"))
        operator.inputs.on_claim("ADDED", on_node("c1", "vm-1", "host-a"))
        operator.inputs.on_claim("ADDED", on_node("c2", "vm-2", "host-a"))
        assert operator.inputs.claims_holding("vm-1") == [("ns", "c1")]
        operator.inputs.on_claim("MODIFIED", {**on_node("c1", "vm-3", "host-a"), "x": 1})
        assert operator.inputs.claims_holding("vm-1") == []
        assert operator.inputs.claims_holding("vm-3") == [("ns", "c1")]

        queued: list[tuple[str, str]] = []
        operator.claims.enqueue = lambda key, after=0.0: queued.append(key)  # type: ignore
        operator.inputs.nodes_listed = True
        operator.inputs.on_node("ADDED", node("host-a"))
        assert sorted(queued) == [("ns", "c1"), ("ns", "c2")]
        queued.clear()
        operator.inputs.on_claim("DELETED", on_node("c2", "vm-2", "host-a"))
        operator.inputs.on_node(
            "MODIFIED", {**node("host-a"), "metadata": {"name": "host-a", "resourceVersion": "2"}}
        )
        assert queued == [("ns", "c1")]


def waiting(name: str, created: str, pool: str = "warm", **spec: Any) -> dict[str, Any]:
    body = claim(name)
    body["metadata"]["creationTimestamp"] = created  # type: ignore[index]
    body["spec"] = {"poolRef": {"name": pool}, **spec}
    body["status"] = {"phase": "Pending"}
    return body


def available(pool: str) -> Event:
    return Event(1, EventType.VM_AVAILABLE, PoolRef("ns", pool), "vm-new", None)


@pytest.mark.req("CL-109")
async def test_each_microvm_made_available_wakes_the_claim_waiting_longest_for_its_pool() -> None:
    async with offline_operator() as operator:
        clock = FakeClock()
        operator.inputs.waiters = Waiters(clock)
        inputs = operator.inputs
        inputs.on_claim("ADDED", waiting("new", "2026-12-06T10:00:05Z"))
        inputs.on_claim("ADDED", waiting("old", "2026-12-06T10:00:01Z"))
        inputs.on_claim(
            "ADDED",
            waiting("via-fallback", "2026-12-06T10:00:03Z", pool="cold",
                    fallbackPoolRefs=[{"name": "warm"}]),
        )  # fmt: skip
        inputs.on_claim("ADDED", waiting("elsewhere", "2026-12-06T09:00:00Z", pool="other"))
        unread = waiting("unread", "2026-12-06T09:00:00Z")
        del unread["status"]  # its first reconcile is under way: not waiting
        inputs.on_claim("ADDED", unread)
        bound = waiting("bound", "2026-12-06T09:00:00Z")
        bound["status"] = {"phase": "Bound", "leaseID": "l1"}
        inputs.on_claim("ADDED", bound)

        queued: list[tuple[str, str]] = []
        operator.claims.enqueue = lambda key, after=0.0: queued.append(key)  # type: ignore
        for _ in range(4):  # a refill of four MicroVMs, three claims waiting for them
            await inputs.on_battery_event(available("warm"))
        assert queued == [("ns", "old"), ("ns", "via-fallback"), ("ns", "new")]
        clock.advance(HOLD_SECONDS)  # the woken claim that still waits is woken again
        await inputs.on_battery_event(available("warm"))
        assert queued[-1] == ("ns", "old")
        assert operator.sizes()["claims:woken"] == 1


def pool_with(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "Pool",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


def held(name: str, created: str, pool: str = "warm", **spec: Any) -> dict[str, Any]:
    """`waiting` with the finalizer (so its events queue only what PO-107 queues), Pending
    `PoolExhausted`."""
    body = waiting(name, created, pool, **spec)
    body["metadata"]["finalizers"] = [names.CLAIM_FINALIZER]
    body["status"]["conditions"] = [{"type": "Bound", "status": "False", "reason": "PoolExhausted"}]
    return body


@pytest.mark.req("PO-107")
async def test_a_pool_that_sizes_itself_hears_each_claim_once_and_counts_the_waiting() -> None:
    async with offline_operator() as operator:
        inputs = operator.inputs
        demand = operator.pool_deps.demand
        key = PoolKey("ns", "warm")
        # Made before the Pool had a policy: counted once it has one.
        inputs.on_claim("ADDED", held("early", "2026-12-06T10:00:01Z"))
        inputs.on_pool("ADDED", pool_with("warm", size=2))
        assert demand.last_arrival(key) is None, "a Pool without a policy records nothing"

        queued: list[tuple[tuple[str, str], float]] = []
        operator.pools.enqueue = lambda key, after=0.0: queued.append((key, after))  # type: ignore
        inputs.on_pool("MODIFIED", pool_with("warm", autoscaling={"maxSize": 5}))
        inputs.on_claim("ADDED", held("late", "2026-12-06T10:00:09Z"))
        inputs.on_claim("MODIFIED", held("late", "2026-12-06T10:00:09Z"))  # not again
        inputs.on_claim("ADDED", held("fell-back", "2026-12-06T10:00:08Z", pool="cold",
                                         fallbackPoolRefs=[{"name": "warm"}]))  # fmt: skip
        since = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
        assert demand.arrivals_since(key, since) == (2, since + timedelta(seconds=1))
        assert demand.last_arrival(key) == since + timedelta(seconds=9)
        # Waiting: the two Pending claims whose first Pool is `warm`, not the one that only
        # names it as a fallback, nor one Pending for another reason.
        assert demand.waiting(key) == 2
        unavailable = held("other-reason", "2026-12-06T10:00:07Z")
        unavailable["status"]["conditions"][0]["reason"] = "BatteryUnavailable"
        inputs.on_claim("ADDED", unavailable)
        assert demand.waiting(key) == 2
        bound = held("late", "2026-12-06T10:00:09Z")
        bound["status"] = {"phase": "Bound", "leaseID": "l1"}
        inputs.on_claim("MODIFIED", bound)
        assert demand.waiting(key) == 1
        # Arrivals and starts and ends of a wait queued the Pool, a second later (coalesced);
        # an event that changes neither (a renewal, the operator's own write) queues nothing.
        assert set(queued) == {(("ns", "warm"), POOL_EVENT_COALESCE_SECONDS)}
        queued.clear()
        renewed = copy.deepcopy(bound)
        renewed["spec"]["renewTime"] = "2026-12-06T10:01:00Z"
        inputs.on_claim("MODIFIED", renewed)
        assert queued == []
        # The first complete list of claims: the policy knows the claims from then.
        assert demand.since is None
        inputs.on_claims_listed([renewed])
        assert demand.since is not None
        assert (("ns", "warm"), 0.0) in queued
        inputs.on_pool("DELETED", pool_with("warm", autoscaling={"maxSize": 5}))
        assert demand.last_arrival(key) is None


async def test_the_size_of_every_map_is_exported_at_each_scrape() -> None:
    registry = CollectorRegistry()
    async with offline_operator(OperatorMetrics(registry)) as operator:
        operator.inputs.on_claim("ADDED", on_node("c1", "vm-1", "host-a"))

        def entries(name: str) -> float | None:
            return registry.get_sample_value(f"{NAMESPACE}_cache_entries", {"map": name})

        assert entries("claims:bodies") == 1
        assert entries("claims:index:microvm") == 1
        operator.inputs.on_claim("DELETED", on_node("c1", "vm-1", "host-a"))
        assert entries("claims:bodies") == 0
        assert entries("claims:index:microvm") == 0


class OneEventStream(SwitchedStream):
    """Subscribed, with one battery event to deliver, then nothing more."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self._events = [event]

    async def __anext__(self) -> Event:
        if self._events:
            return self._events.pop()
        return await super().__anext__()


@pytest.mark.req("CL-013", "CL-030")
async def test_a_battery_event_whose_handling_fails_still_reaches_the_claim() -> None:
    """Issue 43: an exception while handling a battery event dropped the event; battery does
    not send it again, so the claim whose MicroVM it deleted would have stayed Bound."""
    event = Event(
        id=7,
        type=EventType.VM_DELETED_DUE_TO_EXPIRY,
        pool=PoolRef(namespace="ns", name="warm"),
        vm_uid="vm-c1",
        created_at=None,
    )
    async with offline_operator() as operator:
        operator.inputs.on_claim("ADDED", bound_claim("c1", timedelta(hours=1)))
        key = ("ns", "c1")
        operator.lease_checks.done(key)  # its listed-at-start check is behind it
        queued: list[tuple[str, str]] = []
        reached = asyncio.Event()

        def enqueue(k: tuple[str, str], after: float = 0.0) -> None:
            queued.append(k)
            reached.set()

        operator.claims.enqueue = enqueue  # type: ignore

        def broken(vm_uid: str) -> list[tuple[str, str]]:
            raise RuntimeError("a fault while routing the event")

        operator.inputs.claims_holding = broken  # type: ignore[method-assign]
        stream = OneEventStream(event)
        stream.connect()
        operator.loops.stream = stream  # type: ignore[assignment]
        task = asyncio.create_task(operator.loops.follow_battery_events())
        try:
            await asyncio.wait_for(reached.wait(), timeout=10)
        finally:
            await stream.aclose()
            await task
        assert key in queued
        assert operator.lease_checks.due(key), "its Lease is read from battery"
