"""Per-Pool retry delays for reconciles that end waiting on battery.

A reconcile that cannot finish (battery unavailable, or deletion refused while MicroVMs are
leased) returns normally, with its status written and a requeue; the work queue's own error
backoff only counts raised errors. So the delay grows here instead: 1, 2, 4 ... seconds,
clamped by `outcome.clamp_backoff` to at most 30, and back to 1 once a reconcile of that Pool
completes. Kept in memory: after an Operator restart a Pool starts again at 1 s.
"""

from __future__ import annotations

from collections.abc import Hashable

from batteryop.operator.outcome import clamp_backoff


class Backoff:
    """Consecutive waits per key, and the delay each one earns."""

    def __init__(self) -> None:
        self._waits: dict[Hashable, int] = {}

    def next_delay(self, key: Hashable) -> float:
        """Count one more wait for `key`; seconds until it should be retried."""
        waits = self._waits.get(key, 0) + 1
        self._waits[key] = waits
        return clamp_backoff(2.0 ** min(waits - 1, 16))

    def reset(self, key: Hashable) -> None:
        """`key` completed: its next wait starts from the shortest delay again."""
        self._waits.pop(key, None)

    def __len__(self) -> int:
        return len(self._waits)

    def waits(self, key: Hashable) -> int:
        return self._waits.get(key, 0)
