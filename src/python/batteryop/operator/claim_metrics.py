"""`ClaimMetrics`: the claims gauge by phase and the time to Bound, kept as watch events arrive.

Counted as phases change, so no metric walks every claim per event; each claim's first-seen
time and phase leave with its DELETED event (sizes for the leak checks). A first-seen time is
kept only while the claim can still become Bound (no phase yet, or Pending): an Expired claim
never will, and 10,000 of them would otherwise each hold one until deleted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.conditions import ClaimPhase
from batteryop.obs.metrics import OperatorMetrics
from batteryop.operator.runtime import Key, key_of


class ClaimMetrics:
    """Claims by phase and create-to-Bound time, for `OperatorMetrics` (None: nothing kept)."""

    def __init__(self, metrics: OperatorMetrics | None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._metrics = metrics
        self.clock = clock
        self._first_seen: dict[Key, float] = {}
        self._phases: dict[Key, str] = {}
        self._phase_counts: Counter[str] = Counter()

    def oldest_pending_seconds(self) -> float:
        """How long the oldest claim not yet Bound has waited since first seen; 0 for none
        (`claim_pending_oldest_seconds`, read at each scrape)."""
        if not self._first_seen:
            return 0.0
        return max(self.clock.monotonic() - min(self._first_seen.values()), 0.0)

    def sizes(self) -> dict[str, int]:
        return {"claims:first_seen": len(self._first_seen), "claims:phases": len(self._phases)}

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """One watch event (None: listed) of the claim `body`."""
        if self._metrics is None:
            return
        key = key_of(body)
        phase = None if event_type == "DELETED" else (body.get("status") or {}).get("phase")
        before = self._phases.pop(key, None)
        if phase:
            self._phases[key] = str(phase)
        if before != phase:  # counted as they change: no walk over every claim per event
            if before:
                self._phase_counts[before] -= 1
            if phase:
                self._phase_counts[str(phase)] += 1
            self._metrics.set_claims_by_phase(+self._phase_counts)
        if event_type == "DELETED":
            self._first_seen.pop(key, None)
            return
        if not phase or phase == ClaimPhase.PENDING:
            self._first_seen.setdefault(key, self.clock.monotonic())
            return
        seen = self._first_seen.pop(key, None)
        if seen is not None and phase == ClaimPhase.BOUND:
            # From the first watch event of an unbound claim to the first one showing it
            # Bound: what a consumer waits, at this process's clock resolution.
            self._metrics.observe_claim_bound(self.clock.monotonic() - seen)
