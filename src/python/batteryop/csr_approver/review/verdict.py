"""Step `check`: `checks.review` over the request and the facts the steps before read (the
Node, the pins) and the approver's configuration. Pure: the verdict is for `decide` and `sign`.
"""

from __future__ import annotations

from batteryop.csr_approver.checks import Facts, review
from batteryop.csr_approver.review.scope import ReviewScope


async def check(scope: ReviewScope) -> None:
    config = scope.deps.config
    facts = Facts(
        trust_domain=config.trust_domain,
        exec_agent_username=config.exec_agent_username,
        node=scope.node,
        pins=scope.pins.addresses,
    )
    scope.verdict = review(scope.request, facts)
