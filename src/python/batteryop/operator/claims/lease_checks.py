"""`LeaseChecks`: Bound claims that must read their Lease from battery at their next reconcile.

CL-030: on start and whenever battery's Events stream connects again, every Bound claim (not
being deleted) is checked against battery's Leases. Between the two battery may have lost,
ended or expired a Lease, and no event says so (battery replays its outbox to a new
subscriber, and the replayed events were seen already). `check_expiry` would otherwise read a
Lease only once its recorded expiry passes; a claim marked here reads it at once, and is
unmarked once battery answered.

One ListLeases per Pool answers all of these checks. A marked claim was Bound when it was
marked, so its Lease existed in battery before the mark (the claim records a Lease only after
ClaimVM answered). A ListLeases that *started after the mark* therefore shows that Lease, or
the Lease is gone (CL-012): such an answer is as good as the claim's own call. The answers of
calls that started after a mark are kept here (`keep`) and handed to the checks marked before
them (`shared`). Without this, 10,000 claims listed at a restart each waited for a call of
their own with the few other checks in flight (one per claim worker), and each call carried
the whole Pool's Leases: time quadratic in the number of claims (383 s at 10,000).

A check of a claim that was not marked (just bound, or its recorded expiry passed) never
takes a kept answer: its Lease may be younger than the call (`LeaseReads` gives it a call that
started after it asked).

Marks are numbered; an answer carries the number of the last mark made before its call was
asked for, so it serves every mark up to that number. Everything here is held only while
some claim is marked: the set leaves a claim when its check was answered, when it is no
longer Bound, or when it is deleted (`done`), and the kept answers go with the last mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from batteryop.battery.models import Lease, PoolRef

ClaimKey = tuple[str, str]
"""(namespace, name) of a claim."""


@dataclass(frozen=True)
class _Answer:
    marks: int
    """Every mark numbered up to this was made before the call started."""
    leases: Sequence[Lease]
    """The Pool's Leases (`find_lease` reads one)."""


class LeaseChecks:
    """The claims whose Lease is to be read from battery whatever their recorded expiry, and
    the ListLeases answers that may serve them."""

    def __init__(self) -> None:
        self._due: dict[ClaimKey, int] = {}
        self._marks = 0
        self._answers: dict[PoolRef, _Answer] = {}

    def require(self, key: ClaimKey) -> None:
        self._marks += 1
        self._due[key] = self._marks

    def due(self, key: ClaimKey) -> bool:
        return key in self._due

    def asking(self) -> int:
        """To call just before a ListLeases is asked for: the number its answer carries."""
        return self._marks

    def keep(self, pool: PoolRef, marks: int, leases: Sequence[Lease]) -> None:
        """The answer of a ListLeases of `pool` asked for when `asking()` said `marks`."""
        if not self._due:
            return
        kept = self._answers.get(pool)
        if kept is None or kept.marks < marks:
            self._answers[pool] = _Answer(marks, leases)

    def shared(self, key: ClaimKey, pool: PoolRef) -> Sequence[Lease] | None:
        """`pool`'s Leases from a call that started after `key` was marked, if any."""
        mark = self._due.get(key)
        kept = self._answers.get(pool)
        if mark is None or kept is None or kept.marks < mark:
            return None
        return kept.leases

    def done(self, key: ClaimKey) -> None:
        self._due.pop(key, None)
        if not self._due:
            self._answers.clear()

    def __len__(self) -> int:
        return len(self._due)

    def sizes(self) -> dict[str, int]:
        """Entries held, for the leak checks."""
        return {"claims:lease_checks": len(self._due), "claims:lease_answers": len(self._answers)}
