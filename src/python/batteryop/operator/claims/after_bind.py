"""after bind: in the reconcile that binds, the cache-only steps the bind's stop skipped
(CL-005, CL-006, CL-050..CL-053).

`bind` stops the chain when ClaimVM succeeded, so that no other battery call comes before the
status write recording the Lease (CL-002). The steps that read only the cache (the Node
report: `agent` and `host_ready`) call nothing, so they still run here and the bind's status
write carries the Exec Agent address and HostReady too: one write instead of two.
"""

from __future__ import annotations

from batteryop.operator.claims.agent import agent_address
from batteryop.operator.claims.host_ready import host_ready
from batteryop.operator.claims.scope import ClaimScope

AFTER_BIND = (agent_address, host_ready)
"""Steps that read only the cache, run in the reconcile that binds."""


async def after_bind(scope: ClaimScope) -> None:
    """The cache-only steps, when this reconcile bound the claim."""
    if scope.just_bound:
        for step in AFTER_BIND:
            await step(scope)
