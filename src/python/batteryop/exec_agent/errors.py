"""How the agent says no: `RefusedError`, a gRPC status and a message naming the failed check.

Every refusal of the exec API is one of these, raised where the check fails and turned into the
call's status in one place (`servicer.refuse`). The message starts with the check's name
(`Check`), so a caller (and a log reader) sees which rule stopped the call, and carries only what
the caller sent or what its own token names: never another claim's data (EA-100; the checks
are EA-010..EA-014).

    Exception
    └── RefusedError        .code (grpc.StatusCode), .check (Check), .detail
"""

from __future__ import annotations

import enum
from typing import Protocol

import grpc


class Check(enum.StrEnum):
    """The checks a call passes, in the order they run; the prefix of every refusal."""

    LIMIT = "limit"
    """The caller's address has not failed too often (EA-105), its identity has calls left
    (EA-120, EA-121), and a stream slot is free, also for its Holder (EA-105, EA-123)."""
    BEARER_TOKEN = "bearer token"
    """Exactly one `authorization: Bearer <token>` metadata entry, whose unverified claims name
    the agent's audience and are not expired (EA-010, EA-107)."""
    TOKEN_REVIEW = "token review"
    """The API server authenticates the token for the agent's audience (EA-010, EA-014)."""
    REQUEST = "request"
    """The exec stream's first message is a start naming a MicroVM; no second start."""
    TOKEN_BINDING = "token binding"
    """The token is bound to a claim's `<claim>-exec` Secret by name and uid (EA-012)."""
    CLAIM_LOOKUP = "claim lookup"
    """The claim named by the token's Secret, read fresh from the API server (EA-014)."""
    HOLDER = "holder"
    """The token's user is the claim's Holder (EA-011)."""
    CLAIM = "claim"
    """The claim is Bound, unexpired, and names this MicroVM and this Host (EA-013); checked
    again while a stream runs, which ends when it no longer holds (EA-106)."""
    FLINTLOCKD = "flintlockd"
    """This Host's flintlockd answered for the MicroVM and accepted the stream (EA-021)."""


class RefusedError(Exception):
    """The agent refuses the call with `code`; `check` names the rule that failed."""

    def __init__(self, code: grpc.StatusCode, check: Check, detail: str) -> None:
        super().__init__(code, check, detail)
        self.code = code
        self.check = check
        self.detail = detail

    @property
    def message(self) -> str:
        """The status message the caller receives: `<check>: <detail>`."""
        return f"{self.check}: {self.detail}"

    def __str__(self) -> str:
        return f"{self.code.name} {self.message}"


class RefusalObserver(Protocol):
    def observe_refusal(self, check: Check, code: grpc.StatusCode) -> None:
        """A call was refused (or a running stream ended) by `check` with `code`."""
