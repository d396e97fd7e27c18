"""`LeaseReads`: one ListLeases per Pool serves every expiry check waiting for it (CL-016).

A claim reads its Lease back from battery right after it is bound (its status has no expiry
yet) and whenever its recorded expiry passes. ListLeases answers every Lease of the Pool, so
when 100 claims of one Pool bind together, 100 checks would each fetch the same 100 Leases.
Instead the checks of one Pool share calls.

The rule that keeps a shared answer as good as a caller's own: a caller only ever gets the
answer of a call that *started after it asked*. A caller that finds a call in flight does not
take that call's answer (it could predate the caller's own ClaimVM, and a Lease missing from
it would wrongly expire the claim, CL-012); it waits for the next call, which starts as soon
as the one in flight ends and serves everyone who asked meanwhile. So with calls back to back,
one ListLeases per Pool serves any number of checks, at most one call's time later.

An error answers every caller of that call the same way (each retries as its own, CL-017).
One event loop, so no lock.

A Lease an answer *lists* is a fact however late the caller came: battery held it, with that
expiry, when the call ran. So the newest answer of a Pool, for `RECENT_SECONDS` after its call
started, also serves a check whose Lease it lists with an expiry still ahead (`recent`):
that check records the same expiry it would have read a moment later, as if it had checked
that much earlier, and its next check comes at that expiry (CL-032) like any other's. In a
burst of binds most checks find their Lease in the answer of the check before them, so a
Pool is listed a few times a second instead of once per claim. A Lease the answer does not
list, or lists as expired, proves nothing about now: that check still waits for a call that
started after it asked (CL-012, CL-014 are only ever decided on a fresh answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.battery.models import Lease, PoolRef, find_lease
from batteryop.battery.protocol import BatteryAPI

RECENT_SECONDS = 2.0
"""How long after its call started a Pool's newest ListLeases answer serves the checks whose
Lease it lists (`LeaseReads.recent`)."""


class LeaseReads:
    """ListLeases by Pool, shared by callers that asked before the call started."""

    def __init__(
        self,
        battery: BatteryAPI,
        *,
        recent_seconds: float = RECENT_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._battery = battery
        self._next: dict[PoolRef, asyncio.Future[Sequence[Lease]]] = {}
        self._running: dict[PoolRef, asyncio.Future[Sequence[Lease]]] = {}
        self._recent: dict[PoolRef, tuple[float, Sequence[Lease]]] = {}
        self._recent_seconds = recent_seconds
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0

    def __len__(self) -> int:
        """Pools with a ListLeases waiting or running (for leak checks)."""
        return len(self._next.keys() | self._running.keys())

    def recent_answers(self) -> int:
        """Pools whose newest answer is kept for `recent` (each for `RECENT_SECONDS`)."""
        return len(self._recent)

    def recent(self, pool: PoolRef, lease_id: str) -> Lease | None:
        """The Lease `lease_id` as `pool`'s newest ListLeases answer lists it, if that call
        started at most `RECENT_SECONDS` ago; None when it does not list it (or is older)."""
        kept = self._recent.get(pool)
        if kept is None or self._clock.monotonic() - kept[0] > self._recent_seconds:
            return None
        return find_lease(kept[1], lease_id)

    async def list_leases(self, pool: PoolRef) -> Sequence[Lease]:
        """battery's Leases of `pool`, from a ListLeases that started after this call."""
        waiting = self._next.get(pool)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._next[pool] = waiting
            task = asyncio.get_running_loop().create_task(self._call(pool, waiting))
            self._tasks.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self._tasks.discard)
        # shield: one caller giving up must not cancel the others' answer.
        return await asyncio.shield(waiting)

    async def _call(self, pool: PoolRef, answer: asyncio.Future[Sequence[Lease]]) -> None:
        try:
            running = self._running.get(pool)
            if running is not None:
                await asyncio.wait([running])  # ours starts only after that one ended
        except asyncio.CancelledError:
            if self._next.get(pool) is answer:
                del self._next[pool]
            answer.cancel()
            raise
        # From here on, new callers wait for the call after this one.
        del self._next[pool]
        self._running[pool] = answer
        try:
            self.calls += 1
            started = self._clock.monotonic()
            leases = await self._battery.list_leases(pool)
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except Exception as err:  # every caller of this call gets it
            answer.set_exception(err)
            answer.exception()  # retrieved here too, so no warning if every caller left
        else:
            answer.set_result(leases)
            # Calls of one Pool never overlap: this answer is its newest.
            kept = self._recent[pool] = (started, leases)
            self._arm_forget(pool, kept)
        finally:
            if self._running.get(pool) is answer:
                del self._running[pool]

    def _arm_forget(self, pool: PoolRef, kept: tuple[float, Sequence[Lease]]) -> None:
        """Drop `kept` once it is too old to serve, so a Pool that is gone leaves nothing."""
        left = kept[0] + self._recent_seconds - self._clock.monotonic()
        # At least a tenth of the window: a clock that stands still on the boundary (age ==
        # RECENT_SECONDS still serves) re-arms the timer, and must not spin the loop.
        asyncio.get_running_loop().call_later(
            max(left, self._recent_seconds / 10), self._forget_recent, pool, kept
        )

    def _forget_recent(self, pool: PoolRef, kept: tuple[float, Sequence[Lease]]) -> None:
        if self._recent.get(pool) is not kept:  # a newer answer replaced it
            return
        if self._clock.monotonic() - kept[0] > self._recent_seconds:
            del self._recent[pool]
        else:
            # The timer runs on the loop's time, the age on `clock`: an injected clock that
            # has not moved keeps the answer (what `recent` serves never depends on the loop's
            # time; the claim property test replays its examples by that).
            self._arm_forget(pool, kept)
