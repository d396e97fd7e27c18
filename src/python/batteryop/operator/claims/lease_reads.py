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
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from batteryop.battery.models import Lease, PoolRef
from batteryop.battery.protocol import BatteryAPI


class LeaseReads:
    """ListLeases by Pool, shared by callers that asked before the call started."""

    def __init__(self, battery: BatteryAPI) -> None:
        self._battery = battery
        self._next: dict[PoolRef, asyncio.Future[Sequence[Lease]]] = {}
        self._running: dict[PoolRef, asyncio.Future[Sequence[Lease]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0

    def __len__(self) -> int:
        """Pools with a ListLeases waiting or running (for leak checks)."""
        return len(self._next.keys() | self._running.keys())

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
            leases = await self._battery.list_leases(pool)
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except Exception as err:  # every caller of this call gets it
            answer.set_exception(err)
            answer.exception()  # retrieved here too, so no warning if every caller left
        else:
            answer.set_result(leases)
        finally:
            if self._running.get(pool) is answer:
                del self._running[pool]
