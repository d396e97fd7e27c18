"""A battery Events subscription that survives reconnects and never yields an event twice.

battery's `Events.Subscribe` has no resume cursor: every new stream replays the whole outbox
from the first event, then polls for new ones. `EventSubscription` keeps one stream open in a
background task; when it breaks (battery restarted, connection lost, stream ended) it opens a
new one after a bounded, jittered exponential backoff (`ReconnectPolicy`), and drops the
replayed events it has already yielded.

Deduplication and its memory bound (`SeenIds`): the subscription remembers the ids of the last
`capacity` events it yielded (a set plus a min-heap, about 100 bytes per id: 1 MB for the
default 10,000) and a `floor`, the highest id it has forgotten. An event is new when its id is
above the floor and not remembered. Forgetting an id raises the floor to it, so every id at or
below the floor counts as already yielded. That is exact when ids arrive in ascending order,
as battery sends them (one global SQLite sequence, written through a single connection and
replayed in id order), and it tolerates out-of-order delivery of up to `capacity` ids (a
server that replays Pool by Pool). Memory stays bounded however long the outbox grows.

State for readiness and resync: `subscribed` is true while a stream is open on a connected
channel; `wait_subscribed()` / `wait_unsubscribed()` await the changes and `generation` counts
the streams that became subscribed, so a resync loop can tell that a reconnect happened
(battery does not event Pool counts, so a reconnect calls for a fresh read). battery (Go)
sends no response headers before the first event, so a stream counts as subscribed once its
channel is READY while the call is still open, or when its first message arrives.

Requirements: DP-012 (readiness follows battery's availability), BA-050 (a new subscriber gets
the whole outbox, then live events).
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections.abc import Callable
from typing import Any, Final

import grpc
import grpc.aio

from batteryop.battery.config import ReconnectPolicy
from batteryop.battery.errors import BatteryError, rpc_boundary
from batteryop.battery.models import Event
from batteryop.battery.observer import CallObserver, notify
from batteryop.battery.wire import event_from_pb

RPC: Final = "Subscribe"
DEFAULT_QUEUE_SIZE: Final = 512


class SeenIds:
    """The ids an event stream already yielded, remembered in bounded memory."""

    def __init__(self, capacity: int, floor: int | None = None) -> None:
        if capacity < 1:
            raise ValueError("SeenIds capacity must be at least 1")
        self._capacity = capacity
        self._floor = floor
        self._ids: set[int] = set()
        self._heap: list[int] = []

    @property
    def floor(self) -> int | None:
        """Every id at or below this counts as seen."""
        return self._floor

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: int) -> bool:
        """Record `event_id`; true if it had not been seen before."""
        if self._floor is not None and event_id <= self._floor:
            return False
        if event_id in self._ids:
            return False
        self._ids.add(event_id)
        heapq.heappush(self._heap, event_id)
        if len(self._ids) > self._capacity:
            oldest = heapq.heappop(self._heap)
            self._ids.discard(oldest)
            self._floor = oldest if self._floor is None else max(self._floor, oldest)
        return True


class _Closed:
    pass


_CLOSED: Final = _Closed()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


StreamOpener = Callable[[], Any]
"""Starts a new `Subscribe` call (a grpc.aio unary-stream call)."""


class EventSubscription:
    """`async for event in subscription` over battery's events, across reconnects.

    The stream starts on first iteration, `start()`, `wait_subscribed()` or `async with`.
    Iteration ends only after `aclose()` (also called by `BatteryClient.aclose()`); stream
    failures are retried, and the last one is kept in `last_error`. Keep iterating: events
    wait in a bounded queue, and once it is full the stream is not read any further.
    """

    def __init__(
        self,
        opener: StreamOpener,
        channel: grpc.aio.Channel,
        *,
        policy: ReconnectPolicy,
        capacity: int,
        after_id: int | None = None,
        observer: CallObserver | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        rng: random.Random | None = None,
        on_close: Callable[[EventSubscription], None] | None = None,
    ) -> None:
        self._opener = opener
        self._channel = channel
        self._policy = policy
        self._seen = SeenIds(capacity, floor=after_id)
        self._observer = observer
        self._rng = rng or random.Random()
        self._on_close = on_close
        self._queue: asyncio.Queue[Event | _Closed | _Failed] = asyncio.Queue(queue_size)
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._unsubscribed = asyncio.Event()
        self._unsubscribed.set()
        self._closed = False
        self._generation = 0
        self.last_error: BatteryError | None = None

    # --- state ---------------------------------------------------------------------------------

    @property
    def subscribed(self) -> bool:
        """True while a stream is open on a connected channel."""
        return self._subscribed.is_set()

    @property
    def generation(self) -> int:
        """How many streams have become subscribed so far (1 after the first)."""
        return self._generation

    @property
    def closed(self) -> bool:
        return self._closed

    async def wait_subscribed(self) -> None:
        """Start the stream if needed and wait until it is subscribed."""
        self.start()
        await self._subscribed.wait()

    async def wait_unsubscribed(self) -> None:
        """Wait until no stream is subscribed (at once if none is)."""
        await self._unsubscribed.wait()

    def _set_subscribed(self) -> None:
        if not self._subscribed.is_set():
            self._generation += 1
            self._unsubscribed.clear()
            self._subscribed.set()

    def _set_unsubscribed(self) -> None:
        self._subscribed.clear()
        self._unsubscribed.set()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Open the stream in the background (idempotent)."""
        if self._closed:
            raise RuntimeError("the event subscription is closed")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="battery-events-subscription"
            )

    async def aclose(self) -> None:
        """Stop the stream; iteration ends after the events already queued."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        self._set_unsubscribed()
        self._push_last(_CLOSED)
        if self._on_close is not None:
            self._on_close(self)

    def _push_last(self, item: _Closed | _Failed) -> None:
        """Queue the item that ends iteration, dropping the oldest event if the queue is full."""
        while True:
            try:
                self._queue.put_nowait(item)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()

    async def __aenter__(self) -> EventSubscription:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> EventSubscription:
        return self

    async def __anext__(self) -> Event:
        if not self._closed:
            self.start()
        elif self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, _Closed | _Failed):
            self._queue.put_nowait(item)  # later calls end the same way
            if isinstance(item, _Failed):
                raise item.error
            raise StopAsyncIteration
        return item

    # --- the background stream -----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            backoff = self._policy.backoff(self._rng)
            while True:
                started = time.monotonic()
                delivered = await self._attempt()
                lasted = time.monotonic() - started
                # A stream that delivered something, or stayed open longer than the longest
                # wait, was healthy: start the backoff again from its first step.
                if delivered or lasted >= backoff.maximum:
                    backoff.reset()
                await asyncio.sleep(backoff.next())
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug: hand it to the consumer rather than hang it
            self._set_unsubscribed()
            self._push_last(_Failed(err))

    async def _attempt(self) -> bool:
        """One stream, from open to failure or end; true if it delivered any message."""
        started = time.monotonic()
        delivered = False
        code = "OK"
        call: Any = None
        watcher: asyncio.Task[None] | None = None
        try:
            with rpc_boundary(RPC):
                call = self._opener()
                watcher = asyncio.get_running_loop().create_task(self._watch_connected(call))
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        # battery never ends the stream itself; reconnect as after a failure.
                        break
                    delivered = True
                    self._set_subscribed()
                    event = event_from_pb(message)
                    if self._seen.add(event.id):
                        await self._queue.put(event)
        except BatteryError as err:
            code = err.code
            self.last_error = err
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            if call is not None:
                call.cancel()
            self._set_unsubscribed()
            notify(self._observer, RPC, code, time.monotonic() - started)
        return delivered

    async def _watch_connected(self, call: Any) -> None:
        """Mark the stream subscribed once the channel is READY while the call is open."""
        state = self._channel.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            await self._channel.wait_for_state_change(state)
            state = self._channel.get_state(try_to_connect=True)
        if not call.done():
            self._set_subscribed()
