"""The claim's status merge-patch.

`status_patch` compares the status as read with the status the steps produced and returns the
smallest RFC 7386 merge-patch between them (`outcome.merge_patch_from`, as for Pools): changed
fields, `None` for fields to remove (e.g. `host.agentAddress` when the Node stops publishing
it: CL-006), the whole `conditions` list when any condition changed. None when nothing
changed, so a steady claim costs no write.

Every claim retry waits `outcome.backoff_since` a condition changed status: a Pending claim
counts from `Bound`'s lastTransitionTime (CL-003, CL-004, CL-007, CL-062, CL-063), a failing
battery call from `Synced`'s (CL-015, CL-017, CL-022, CL-041).
"""

from __future__ import annotations

from typing import Any

from batteryop.api.claim import ClaimStatus
from batteryop.kube.outcome import merge_patch_from


def status_patch(before: ClaimStatus, after: ClaimStatus) -> dict[str, Any] | None:
    """The merge-patch taking `before` to `after`, or None if their bodies are equal (times
    that differ only below what Kubernetes stores, a second or a microsecond, are equal)."""
    if before == after:
        return None
    return merge_patch_from(before.to_dict(), after.to_dict())
