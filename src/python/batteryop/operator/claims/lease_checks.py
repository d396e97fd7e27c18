"""`LeaseChecks`: Bound claims that must read their Lease from battery at their next reconcile.

CL-030: on start and whenever battery's Events stream connects again, every Bound claim (not
being deleted) is checked against battery's Leases. Between the two battery may have lost,
ended or expired a Lease, and no event says so (battery replays its outbox to a new
subscriber, and the replayed events were seen already). `check_expiry` would otherwise read a
Lease only once its recorded expiry passes; a claim marked here reads it at once, through the
ListLeases calls shared per Pool (`LeaseReads`), and is unmarked once battery answered.

The set holds only claims the operator knows: a claim leaves it when its check was answered,
when it is no longer Bound, or when it is deleted (`done`).
"""

from __future__ import annotations

ClaimKey = tuple[str, str]
"""(namespace, name) of a claim."""


class LeaseChecks:
    """The claims whose Lease is to be read from battery whatever their recorded expiry."""

    def __init__(self) -> None:
        self._due: set[ClaimKey] = set()

    def require(self, key: ClaimKey) -> None:
        self._due.add(key)

    def due(self, key: ClaimKey) -> bool:
        return key in self._due

    def done(self, key: ClaimKey) -> None:
        self._due.discard(key)

    def __len__(self) -> int:
        return len(self._due)
