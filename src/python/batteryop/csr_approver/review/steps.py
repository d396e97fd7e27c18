"""`review_request`: one review of one request, the steps of `CHAIN` in order until one stops
it (`batteryop.kube.chain`). The tuple is the order; each step's module says what it owns.
"""

from __future__ import annotations

from batteryop.csr_approver.review.decide import decide
from batteryop.csr_approver.review.node import read_node
from batteryop.csr_approver.review.pins import read_addresses_pinned
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.csr_approver.review.sign import sign
from batteryop.csr_approver.review.verdict import check
from batteryop.kube.chain import Step, run_chain

CHAIN: tuple[Step[ReviewScope], ...] = (read_node, read_addresses_pinned, check, decide, sign)
"""The steps, in order, until one stops the chain."""


async def review_request(scope: ReviewScope) -> None:
    await run_chain(scope, CHAIN, ())


__all__ = ["CHAIN", "review_request"]
