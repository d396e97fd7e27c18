"""Which waiting claim a MicroVM that became available wakes (CL-109).

A claim `bind` left Pending tries again after its backoff (1-30 s, `pending`). battery reports
each MicroVM that becomes available (`VM_AVAILABLE`, on its Pool); the operator then queues,
at once, the claim that has waited longest among the Pending claims whose list names that
Pool (first or fallback, `indexes.BY_WAITING_POOL`; a claim not yet reconciled is not
waiting). One claim per MicroVM: a refill of k MicroVMs wakes k
claims, and a Pool with a thousand waiting claims gets one more ClaimVM per MicroVM, not a
thousand. A claim woken is not woken again for `HOLD_SECONDS`, while its reconcile is under
way, so the next MicroVM goes to the next claim. A claim missed here (its wake lost in a
restart, say) still binds at its next backoff retry.
"""

from __future__ import annotations

from collections.abc import Iterable

from batteryop.api.clock import Clock

Key = tuple[str, str]

HOLD_SECONDS = 2.0
"""How long a woken claim is passed over by the next wakes (its reconcile takes milliseconds)."""


class Waiters:
    """The claims woken lately, and the choice of the next one."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._woken: dict[Key, float] = {}

    def pick(self, waiting: Iterable[tuple[str, Key]]) -> Key | None:
        """Of `waiting` ((creationTimestamp, key) pairs), the oldest claim not woken within
        `HOLD_SECONDS`, now marked woken; None if there is none."""
        now = self._clock.monotonic()
        self._woken = {k: t for k, t in self._woken.items() if now - t < HOLD_SECONDS}
        fresh = [(created, key) for created, key in waiting if key not in self._woken]
        if not fresh:
            return None
        _, key = min(fresh)
        self._woken[key] = now
        return key

    def __len__(self) -> int:
        return len(self._woken)
