"""The Events subscription: reconnects, drops replayed events, reports its state."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime

import grpc
import grpc.aio
import pytest
from google.protobuf import timestamp_pb2

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.battery.client import BatteryClient
from batteryop.battery.conftest import (
    FAST_RECONNECT,
    WAIT,
    ClientFactory,
    RecordingObserver,
    Served,
    Session,
    serve,
)
from batteryop.battery.events import EventSubscription, SeenIds
from batteryop.battery.models import Event, EventType, PoolRef
from batteryop.battery.protocol import EventStream

REF = PoolRef(namespace="ci", name="runners")
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def pb_events(ids: Iterable[int]) -> list[types_pb2.Event]:
    return [
        types_pb2.Event(
            id=i,
            pool_name="runners",
            pool_namespace="ci",
            vm_uid=f"vm-{i}",
            type=types_pb2.VM_AVAILABLE,
        )
        for i in ids
    ]


async def take(subscription: EventSubscription, count: int) -> list[Event]:
    got: list[Event] = []
    try:
        async with asyncio.timeout(WAIT):
            async for event in subscription:
                got.append(event)
                if len(got) == count:
                    break
    except TimeoutError:
        pytest.fail(f"timed out after {WAIT}s with {len(got)} of {count} events: {got}")
    return got


async def bounded(awaitable: object, what: str) -> None:
    try:
        await asyncio.wait_for(awaitable, WAIT)  # type: ignore[arg-type]
    except TimeoutError:
        pytest.fail(f"timed out after {WAIT}s waiting for {what}")


# --- SeenIds ---------------------------------------------------------------------------------


def test_seen_ids_drop_repeats() -> None:
    seen = SeenIds(10)
    assert [seen.add(i) for i in (1, 2, 1, 3, 2)] == [True, True, False, True, False]


def test_seen_ids_memory_is_bounded_and_forgotten_ids_count_as_seen() -> None:
    seen = SeenIds(3)
    assert all(seen.add(i) for i in range(1, 101))
    assert len(seen) == 3
    assert seen.floor == 97
    assert not any(seen.add(i) for i in range(1, 101))  # a full replay yields nothing
    assert seen.add(101)


def test_seen_ids_tolerate_reordering_within_capacity() -> None:
    seen = SeenIds(10)
    assert all(seen.add(i) for i in (5, 9, 2, 7, 1))  # e.g. replayed Pool by Pool
    assert not any(seen.add(i) for i in (1, 2, 5, 7, 9))


def test_seen_ids_start_above_a_given_floor() -> None:
    seen = SeenIds(10, floor=41)
    assert not seen.add(41)
    assert seen.add(42)


# --- against a server ------------------------------------------------------------------------


async def test_reconnects_and_never_yields_a_replayed_event_twice(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.sessions = [
        Session(pb_events([1, 2, 3]), then="drop"),  # battery restarted or connection lost
        Session(pb_events([1, 2, 3, 4, 5]), then="end"),  # the whole outbox again, then EOF
        Session(pb_events([1, 2, 3, 4, 5, 6]), then="hold"),
    ]
    observer = RecordingObserver()
    async with client_for(observer=observer) as battery:
        subscription = battery.events()
        events = await take(subscription, 6)
        assert [e.id for e in events] == [1, 2, 3, 4, 5, 6]
        assert served.battery.subscribes == 3
        assert subscription.subscribed
        assert subscription.generation == 3
    assert [(rpc, code) for rpc, code, _ in observer.calls][:2] == [
        ("Subscribe", "UNAVAILABLE"),
        ("Subscribe", "OK"),
    ]


async def test_dedupe_holds_with_a_tiny_memory(served: Served, client_for: ClientFactory) -> None:
    served.battery.sessions = [
        Session(pb_events(range(1, 21)), then="drop"),
        Session(pb_events(range(1, 24)), then="hold"),
    ]
    async with client_for(seen_event_ids=2) as battery:
        events = await take(battery.events(), 23)
    assert [e.id for e in events] == list(range(1, 24))


async def test_survives_a_battery_restart_on_the_same_port() -> None:
    async with serve() as first:
        first.battery.sessions = [Session(pb_events([1, 2]), then="hold")]
        async with BatteryClient.connect(first.config()) as battery:
            subscription = battery.events()
            assert [e.id for e in await take(subscription, 2)] == [1, 2]
            await first.server.stop(None)
            await bounded(subscription.wait_unsubscribed(), "the stream to break")
            assert subscription.last_error is not None
            assert subscription.last_error.code == "UNAVAILABLE"
            async with serve(port=first.port) as second:
                second.battery.sessions = [Session(pb_events([1, 2, 3]), then="hold")]
                assert [e.id for e in await take(subscription, 1)] == [3]
                assert subscription.generation == 2


async def test_subscribed_without_any_event_and_unsubscribed_when_battery_goes(
    served: Served, battery: BatteryClient
) -> None:
    # battery (Go) sends no headers before its first event: an empty outbox must still
    # count as subscribed once the stream is open on a connected channel.
    served.battery.sessions = [Session([], then="hold")]
    subscription = battery.events()
    assert not subscription.subscribed
    await bounded(subscription.wait_subscribed(), "the stream to subscribe")
    assert subscription.subscribed and subscription.generation == 1
    await served.server.stop(None)
    await bounded(subscription.wait_unsubscribed(), "the stream to break")
    assert not subscription.subscribed


async def test_keeps_retrying_through_repeated_failures(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.sessions = [
        Session([], then="drop", code=grpc.StatusCode.UNAVAILABLE),
        Session([], then="drop", code=grpc.StatusCode.INTERNAL),
        Session([], then="drop", code=grpc.StatusCode.UNAUTHENTICATED),
        Session(pb_events([7]), then="hold"),
    ]
    observer = RecordingObserver()
    async with client_for(observer=observer) as battery:
        assert [e.id for e in await take(battery.events(), 1)] == [7]
    codes = [code for rpc, code, _ in observer.calls if rpc == "Subscribe"]
    assert codes[:3] == ["UNAVAILABLE", "INTERNAL", "UNAUTHENTICATED"]


async def test_pool_filter_token_and_after_id(served: Served, client_for: ClientFactory) -> None:
    served.battery.sessions = [Session(pb_events([1, 2, 3, 4]), then="hold")]
    async with client_for(token="s3cret") as battery:
        events = await take(battery.events(REF, after_id=2), 2)
    assert [e.id for e in events] == [3, 4]
    received = served.battery.requests("Subscribe")[0]
    assert (received.request.pool.namespace, received.request.pool.name) == ("ci", "runners")
    assert received.metadata["authorization"].startswith("basic ")


async def test_all_pools_when_no_pool_is_given(served: Served, battery: BatteryClient) -> None:
    served.battery.sessions = [Session(pb_events([1]), then="hold")]
    await take(battery.events(), 1)
    assert not served.battery.requests("Subscribe")[0].request.HasField("pool")


async def test_events_are_parsed(served: Served, battery: BatteryClient) -> None:
    created = timestamp_pb2.Timestamp()
    created.FromDatetime(T0)
    served.battery.sessions = [
        Session(
            [
                types_pb2.Event(
                    id=1,
                    pool_name="runners",
                    pool_namespace="ci",
                    vm_uid="vm-1",
                    type=types_pb2.VM_DELETED_ON_POOL_DELETE,
                    created_at=created,
                ),
                types_pb2.Event(
                    id=2, type=types_pb2.EventType.ValueType(99)
                ),  # a type newer than this client
            ]
        )
    ]
    first, second = await take(battery.events(), 2)
    assert first == Event(
        id=1,
        type=EventType.VM_DELETED_ON_POOL_DELETE,
        pool=REF,
        vm_uid="vm-1",
        created_at=T0,
    )
    assert second.type is EventType.UNSPECIFIED and second.created_at is None


async def test_aclose_ends_iteration(served: Served, battery: BatteryClient) -> None:
    served.battery.sessions = [Session(pb_events([1]), then="hold")]
    subscription = battery.events()
    assert isinstance(subscription, EventStream)
    assert [e.id for e in await take(subscription, 1)] == [1]
    waiting = asyncio.create_task(anext(subscription, None))
    await subscription.aclose()
    assert await asyncio.wait_for(waiting, WAIT) is None
    assert not subscription.subscribed and subscription.closed
    with pytest.raises(StopAsyncIteration):
        await anext(subscription)


async def test_closing_the_client_ends_its_subscriptions(served: Served) -> None:
    served.battery.sessions = [Session([], then="hold")]
    battery = BatteryClient.connect(served.config())
    subscription = battery.events()

    async def drain() -> list[Event]:
        return [event async for event in subscription]

    consumer = asyncio.create_task(drain())
    await bounded(subscription.wait_subscribed(), "the stream to subscribe")
    await battery.aclose()
    assert await asyncio.wait_for(consumer, WAIT) == []
    assert subscription.closed


async def test_async_with_starts_and_stops_the_stream(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.sessions = [Session([], then="hold")]
    async with battery.events() as subscription:
        await bounded(subscription.wait_subscribed(), "the stream to subscribe")
    assert subscription.closed and not subscription.subscribed


async def test_a_bug_in_the_stream_reaches_the_consumer(served: Served) -> None:
    def opener() -> None:
        raise RuntimeError("boom")

    channel = grpc.aio.insecure_channel(served.target)
    subscription = EventSubscription(opener, channel, policy=FAST_RECONNECT, capacity=10)
    try:
        for _ in range(2):  # and again: a failed subscription does not hang its consumer
            with pytest.raises(RuntimeError, match="boom"):
                await asyncio.wait_for(anext(subscription), WAIT)
        assert not subscription.subscribed
    finally:
        await subscription.aclose()
        await channel.close()
