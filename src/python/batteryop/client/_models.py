"""The client's plain values: what a caller passes in and gets back, the same on both sides."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from batteryop.api.conditions import ClaimReason
from batteryop.client._exceptions import CommandFailedError

DEFAULT_TOKEN_EXPIRATION = 600
"""Seconds a requested token lives: the TokenRequest API's minimum (10 minutes)."""


@dataclass(frozen=True)
class Timeouts:
    """How long the client waits, in seconds (`None`: no limit).

    `bind`: for a new claim to become Bound (then the claim is deleted, CC-005); five minutes
    unless set, so a claim that can never bind does not wait forever (CC-113). `request`:
    each Kubernetes API request. `release`: the delete that ends a claim, which runs even after
    the caller was cancelled. `exec_open`: dialling the Exec Agent and opening the stream.
    """

    bind: float | None = 300.0
    request: float = 30.0
    release: float = 30.0
    exec_open: float = 10.0


@dataclass(frozen=True)
class Pending:
    """Why a claim is not Bound yet: the reason and message of its Bound condition (CC-004)."""

    reason: str
    message: str

    @property
    def pool_exhausted(self) -> bool:
        """The Pool has no available MicroVM right now; the claim binds when one is warm."""
        return self.reason == ClaimReason.POOL_EXHAUSTED


@dataclass(frozen=True)
class ClaimInfo:
    """One MicroVMClaim as `ls` lists it: identity, phase, and where its MicroVM runs."""

    name: str
    namespace: str
    uid: str
    pool: str
    """The Pool the Lease is from (a fallback Pool's, CC-116), else the one it names first."""
    holder: str
    phase: str
    microvm_uid: str | None
    node_name: str | None
    agent_address: str | None
    lease_expires_at: datetime | None
    deleting: bool


@dataclass(frozen=True)
class ExecResult:
    """A command's end: its exit code and the output it wrote, each stream in order.

    A non-zero exit code is data, not an error; `check()` turns it into one. `errors` holds
    the messages the guest agent sent instead of output (e.g. the program was not found).
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self) -> ExecResult:
        """This result, or `CommandFailedError` when the exit code is not 0."""
        if self.exit_code != 0:
            raise CommandFailedError(
                f"the command exited with code {self.exit_code}", exit_code=self.exit_code
            )
        return self
