"""Faults a test can inject into the fake battery (TD-006).

`FakeBattery` reads these on every call; tests set them through its methods (or, for the
standalone process, its control endpoint). Everything runs on one event loop, so no locking.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

HOOK_KINDS = ("create", "pre_lease")


@dataclass
class Faults:
    """The fake battery's current faults. A count of None means "until cleared"."""

    # Every RPC (health included) answers UNAVAILABLE.
    unavailable: bool = False
    # ClaimVM waits this long (real seconds) before choosing a VM, or after committing the
    # Lease when claim_delay_after_commit is set (the Lease then stands even if the caller
    # gave up).
    claim_delay: float = 0.0
    claim_delay_after_commit: bool = False
    # Heartbeat answers this code instead of renewing.
    heartbeat_refusal: grpc.StatusCode | None = None
    # Create / pre-lease hooks fail without running (counts; None = every time).
    create_hook_failures: int | None = 0
    pre_lease_hook_failures: int | None = 0
    # New Subscribe streams are refused with UNAVAILABLE.
    refuse_event_streams: bool = False
    # ClaimVM commits the Lease, then fails with this code (for this many calls).
    lost_claim_answers: int = 0
    lost_claim_answer_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE

    def take_hook_failure(self, kind: str) -> bool:
        """Whether this run of a hook of kind ("create" or "pre_lease") must fail."""
        attr = f"{kind}_hook_failures"
        left = getattr(self, attr)
        if left is None:
            return True
        if left <= 0:
            return False
        setattr(self, attr, left - 1)
        return True

    def take_lost_claim_answer(self) -> grpc.StatusCode | None:
        if self.lost_claim_answers <= 0:
            return None
        self.lost_claim_answers -= 1
        return self.lost_claim_answer_code
