"""Where an exec call's time goes: the phases the agent times, and who is told.

Every call through the agent spends its time in a few places: the TokenReview, the fresh read
of the claim, opening the stream on flintlockd (probe, open, start), and the command itself.
The agent reports each to a `PhaseObserver` (the metrics in `metrics.py`, or a test's list), so
a slow call can be blamed on the right party.
"""

from __future__ import annotations

import enum
import time
from typing import Protocol


class Phase(enum.StrEnum):
    TOKEN_REVIEW = "token_review"
    """The TokenReview request to the API server."""
    CLAIM_READ = "claim_read"
    """The fresh read of the claim from the API server."""
    FLINTLOCKD_OPEN = "flintlockd_open"
    """GetMicroVM on flintlockd, opening ExecCommand and sending the start."""
    EXEC = "exec"
    """From the start reaching flintlockd to the exit status (or the failure)."""


class PhaseObserver(Protocol):
    def observe_phase(self, phase: Phase, seconds: float) -> None:
        """One call spent `seconds` in `phase`."""


def observe(observer: PhaseObserver | None, phase: Phase, started: float) -> None:
    """Report the time since `started` (a `time.perf_counter()` value) to `observer`."""
    if observer is not None:
        observer.observe_phase(phase, time.perf_counter() - started)
