"""When a Host change reaches battery: settle time and restart window, with no I/O.

`Settler` (IN-011) holds each Node's wanted membership (an address, or None for "not a
Host") against what battery has. A difference becomes a pending change stamped with the time
it was first seen; it is *settled* once it has held for the settle time. A change that goes
back to what battery has before it settles is forgotten (a flap), and a change that moves on
(another address) starts its clock again.

`Window` (IN-012, DP-008) batches restarts: the first settled change (or a renewed client
certificate) opens a window of the configured length, if none is open; at its close every
change settled by then is applied in one restart. A window that closes with nothing left to do
(everything flapped back) closes silently. So two restarts are at least one window apart, and a
change reaches battery between the settle time and settle time + window after it happened
(+ the drain timeout when a Host leaves, IN-013).

Times are seconds from any monotonic clock the caller passes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Pending:
    """A wanted change for one Node: `address` (None: leave) first seen at `since`."""

    address: str | None
    since: float


class Settler:
    """Pending per-Node changes and when each settles (IN-011)."""

    def __init__(self, settle_time: float) -> None:
        if settle_time < 0:
            raise ValueError("settle_time must not be negative")
        self.settle_time = settle_time
        self.pending: dict[str, Pending] = {}

    def observe(self, wanted: Mapping[str, str], applied: Mapping[str, str], now: float) -> None:
        """Record what every Node wants now (`wanted`: Host name -> address) against
        `applied` (what battery has)."""
        for name in set(wanted) | set(applied) | set(self.pending):
            want, have = wanted.get(name), applied.get(name)
            if want == have:
                self.pending.pop(name, None)  # no change, or a flap back: forgotten
                continue
            seen = self.pending.get(name)
            if seen is None or seen.address != want:
                self.pending[name] = Pending(want, now)

    def settled(self, now: float) -> dict[str, str | None]:
        """Every change that has held for the settle time: name -> address (None: leave)."""
        return {
            name: p.address for name, p in self.pending.items() if now - p.since >= self.settle_time
        }

    def next_settles(self, now: float) -> float | None:
        """When the next change not yet settled settles, or None."""
        times = [
            p.since + self.settle_time
            for p in self.pending.values()
            if now - p.since < self.settle_time
        ]
        return min(times) if times else None

    def applied(self, names: set[str]) -> None:
        """Forget the changes now in battery."""
        for name in names:
            self.pending.pop(name, None)


class Window:
    """The restart window (IN-012): open on the first settled change, act at its close."""

    def __init__(self, length: float) -> None:
        if length < 0:
            raise ValueError("the restart window must not be negative")
        self.length = length
        self.closes_at: float | None = None

    def due(self, now: float, *, work: bool) -> bool:
        """True when the caller should apply now. `work`: a settled change (or a renewed
        certificate) is waiting. Opens the window when work appears and none is open."""
        if self.closes_at is None:
            if not work:
                return False
            self.closes_at = now + self.length
        if now < self.closes_at:
            return False
        self.closes_at = None  # closes, silently when nothing is left (IN-012)
        return work
