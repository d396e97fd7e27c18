"""`ReviewScope`: the working state of one review of one request, shared by its steps.

The request as read (`request`, and `obj`, its newest copy: a write's answer replaces it),
what the steps found (`node`, `pins`, `verdict`) and, from `batteryop.kube.chain.Scope`,
whether the chain has stopped. A step that ends the review (denied, failed, waiting for its CA)
stops the chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batteryop.csr_approver.checks import SERVING_SIGNERS, Approval, Failure, NodeFacts
from batteryop.csr_approver.pins import Pins
from batteryop.csr_approver.request import Request
from batteryop.csr_approver.review.deps import ReviewDeps
from batteryop.kube.chain import Scope
from batteryop.kube.client import Object


@dataclass(kw_only=True)
class ReviewScope(Scope):
    name: str
    request: Request
    obj: Object
    deps: ReviewDeps
    node: NodeFacts | None = None
    """The requester's Node (`node`); None for a client signer or a Node that is not there."""
    pins: Pins = field(default_factory=Pins)
    """The address pins as last read or written (`pins`, `sign`); empty for a client signer."""
    verdict: Approval | Failure | None = None
    """What `checks.review` said (`verdict`)."""

    @property
    def serving(self) -> bool:
        return self.request.signer in SERVING_SIGNERS

    @property
    def extra(self) -> dict[str, str]:
        """What every log line about this request carries."""
        return {"csr": self.name, "signer": self.request.signer}

    def count(self, outcome: str, check: str = "") -> None:
        """The outcome metric (`ApproverMetrics.outcome`)."""
        if self.deps.metrics:
            self.deps.metrics.outcome(self.request.signer, outcome, check)

    def count_pins(self) -> None:
        if self.deps.metrics:
            self.deps.metrics.address_pins.set(len(self.pins.entries))
