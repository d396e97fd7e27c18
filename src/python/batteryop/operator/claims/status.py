"""The claim's status merge-patch, and the backoff read from a condition's transition time.

`status_patch` compares the status as read with the status the steps produced and returns the
smallest RFC 7386 merge-patch between them: changed fields, `None` for fields to remove (e.g.
`host.agentAddress` when the Node stops publishing it: CL-006), the whole `conditions` list
when any condition changed. None when nothing changed, so a steady claim costs no write.

`backoff_since` is how every claim retry waits: the time since a condition last changed its
status, clamped to 1-30 s (`outcome.clamp_backoff`). A Pending claim counts from `Bound`'s
lastTransitionTime (CL-003, CL-004, CL-007, CL-062, CL-063), a failing battery call from
`Synced`'s (CL-015, CL-017, CL-022, CL-041). The wait so roughly doubles while the condition
holds, and survives an Operator restart, since it is read from the claim itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from batteryop.api.claim import ClaimStatus
from batteryop.api.conditions import Condition
from batteryop.operator.outcome import clamp_backoff


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in sorted(before.keys() - after.keys())}
    for key, value in after.items():
        old = before.get(key)
        if old == value:
            continue
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            patch[key] = _diff(old, value)
        else:
            patch[key] = value
    return patch


def status_patch(before: ClaimStatus, after: ClaimStatus) -> dict[str, Any] | None:
    """The merge-patch taking `before` to `after`, or None if their bodies are equal (times
    that differ only below what Kubernetes stores, a second or a microsecond, are equal)."""
    if before == after:
        return None
    return _diff(before.to_dict(), after.to_dict()) or None


def backoff_since(condition: Condition, now: datetime) -> float:
    """Seconds to wait before retrying: time since `condition` changed status, within 1-30 s."""
    return clamp_backoff((now - condition.last_transition_time).total_seconds())
