"""Step `decide`: the approval, from the verdict.

- Not yet Approved: a failure is written as `Denied`, with the check's reason and message
  (CT-013), and the review ends; a pass is written as `Approved` (reason `ExecAgentOwnNode`)
  through `/approval`, and signed next.
- Approved, by anyone: a failure is written as `Failed` through `/status` and the request is
  never signed (CT-006, CT-008); a pass goes on to be signed.
"""

from __future__ import annotations

import logging

from batteryop.api.conditions import CSRCondition, CSRReason
from batteryop.csr_approver.checks import Failure
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.csr_approver.review.writes import write_condition

log = logging.getLogger("batteryop.csr_approver.controller")

APPROVED_MESSAGE = "The Exec Agent requested a certificate for its own Node"
FAILED_PREFIX = "Approved, but not signed: "


async def decide(scope: ReviewScope) -> None:
    verdict = scope.verdict
    assert verdict is not None, "decide runs after check"
    if not scope.request.approved:
        if isinstance(verdict, Failure):
            # CT-013: denied, naming the check.
            await write_condition(scope, CSRCondition.DENIED, verdict.reason, verdict.message)
            scope.count("denied", verdict.check)
            log.info(
                "Denied CertificateSigningRequest",
                extra={**scope.extra, "check": verdict.check, "reason": verdict.message},
            )
            scope.stop()
            return
        await write_condition(
            scope, CSRCondition.APPROVED, CSRReason.EXEC_AGENT_OWN_NODE, APPROVED_MESSAGE
        )
        scope.count("approved")
        log.info("Approved CertificateSigningRequest", extra={**scope.extra, "node": verdict.node})
    elif isinstance(verdict, Failure):
        # CT-006, CT-008: approved by someone, but a check fails: never signed.
        await write_condition(
            scope, CSRCondition.FAILED, verdict.reason, FAILED_PREFIX + verdict.message
        )
        scope.count("failed", verdict.check)
        log.info(
            "Failed CertificateSigningRequest",
            extra={**scope.extra, "check": verdict.check, "reason": verdict.message},
        )
        scope.stop()
