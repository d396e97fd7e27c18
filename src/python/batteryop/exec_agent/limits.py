"""What one caller can cost the agent: failed authentications per peer, and a cheap first look
at a token before the API server is asked about it (EA-105, EA-107).

`FailedAuthLimiter`: a token bucket per peer address (the IP, not the port: a new connection is
free to make). Every call from that peer takes one token when its authentication starts
(`admit`) and gives it back if it authenticates (`succeeded`): what stays taken are failed
authentications, and those under way, so calls sent all at once cannot outrun the bucket. The
bucket holds `burst` and refills at `rate` per second. While it is empty, every call from that
peer is refused with RESOURCE_EXHAUSTED, before any TokenReview or claim read, whatever it
carries. So one address has at most `burst` authentications under way at any moment.

A refused call is answered once the bucket would hold a token again, but after at most
`MAX_HOLD_SECONDS` (`FailedAuthLimiter.turn_away`): a caller that sends one call after another
on a connection is slowed to the bucket's rate instead of making the agent refuse thousands of
calls a second, which on a busy Host takes the CPU its Holders' execs need. At most `max_held`
calls are held so at once; beyond that they are refused at once. At most `max_peers` buckets are kept: when a
new peer would exceed that, the fullest bucket goes (a full bucket is the same as none).
Callers behind one address (a NAT) share its bucket; a Holder whose calls fail again and again
is slowed down too.

`token_precheck`: the token's own, unverified, claims must name the agent's audience and not be
expired (nor valid only later); else the call is UNAUTHENTICATED without a TokenReview. This is
no verification (anyone can write such a token): it only keeps strings that cannot pass from
costing the API server anything. The TokenReview still decides.

Time is `time.monotonic` (injected in tests) for the buckets, the wall clock for the token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import grpc

from batteryop.exec_agent.errors import Check, RefusedError

RESOURCE_EXHAUSTED: Final = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAUTHENTICATED: Final = grpc.StatusCode.UNAUTHENTICATED

MAX_HOLD_SECONDS: Final = 1.0
"""The longest a refused call is held before its refusal is sent."""

CLOCK_SKEW_SECONDS: Final = 60.0
"""Leeway for `nbf`/`exp` against this Host's clock (the API server stamped them)."""


def peer_address(peer: str | None) -> str:
    """The address part of a gRPC peer string: `ipv4:10.0.0.1:5000` -> `10.0.0.1`,
    `ipv6:[::1]:5000` -> `::1`; the string itself when it has no port."""
    if not peer:
        return ""
    _, _, rest = peer.partition(":")
    rest = rest or peer
    if rest.startswith("["):
        return rest[1:].partition("]")[0]
    host, sep, port = rest.rpartition(":")
    return host if sep and port.isdigit() else rest


@dataclass
class _Bucket:
    tokens: float
    at: float


class FailedAuthLimiter:
    """Per-peer token buckets of failed authentications (see the module docstring)."""

    def __init__(
        self,
        *,
        burst: int,
        rate: float,
        max_peers: int = 4096,
        max_held: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._burst = float(burst)
        self._rate = rate
        self._max_peers = max_peers
        self._max_held = max_held
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, _Bucket] = {}
        self.held = 0
        """Refused calls being held now (see the module docstring)."""

    async def turn_away(self, peer: str) -> RefusedError | None:
        """None if a call from `peer` may go on; else its refusal, after holding it until the
        bucket would hold a token (at most `MAX_HOLD_SECONDS`) unless too many are held."""
        refusal = self.check(peer)
        if refusal is None or self.held >= self._max_held:
            return refusal
        bucket = self._buckets[peer]
        wait = (1.0 - self._level(bucket, self._clock())) / self._rate
        self.held += 1
        try:
            await self._sleep(min(wait, MAX_HOLD_SECONDS))
        finally:
            self.held -= 1
        return refusal

    def _level(self, bucket: _Bucket, now: float) -> float:
        return min(self._burst, bucket.tokens + (now - bucket.at) * self._rate)

    def check(self, peer: str) -> RefusedError | None:
        """The refusal `admit` would raise for `peer` now, without taking anything."""
        bucket = self._buckets.get(peer)
        if bucket is None:
            return None
        level = self._level(bucket, self._clock())
        return None if level >= 1.0 else self._refusal(level)

    def _refusal(self, level: float) -> RefusedError:
        wait = (1.0 - level) / self._rate
        return RefusedError(
            RESOURCE_EXHAUSTED,
            Check.LIMIT,
            f"too many failed authentications from this address; try again in {wait:.1f}s",
        )

    def admit(self, peer: str) -> None:
        """Take a token for an authentication from `peer`; RefusedError(RESOURCE_EXHAUSTED)
        while its bucket is empty."""
        now = self._clock()
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) >= self._max_peers:
                fullest = max(self._buckets, key=lambda p: self._level(self._buckets[p], now))
                del self._buckets[fullest]
            bucket = self._buckets[peer] = _Bucket(self._burst, now)
        level = self._level(bucket, now)
        if level < 1.0:
            raise self._refusal(level)
        bucket.tokens, bucket.at = level - 1.0, now

    def succeeded(self, peer: str) -> None:
        """The authentication `admit` took a token for succeeded: give it back."""
        bucket = self._buckets.get(peer)
        if bucket is not None:
            now = self._clock()
            bucket.tokens, bucket.at = min(self._burst, self._level(bucket, now) + 1.0), now

    @property
    def peers(self) -> int:
        """How many peers have a bucket (bounded by `max_peers`)."""
        return len(self._buckets)


def token_precheck(
    payload: Mapping[str, Any] | None, *, audience: str, now: datetime
) -> RefusedError | None:
    """Why the unverified `payload` of a token cannot pass the review, or None (see the module)."""

    def refuse(detail: str) -> RefusedError:
        return RefusedError(UNAUTHENTICATED, Check.BEARER_TOKEN, detail)

    if payload is None:
        return refuse("the token is not a service account token")
    aud = payload.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in audiences:
        return refuse(f"the token is not for audience {audience}")
    moment = now.timestamp()
    exp = payload.get("exp")
    if not isinstance(exp, int | float) or exp + CLOCK_SKEW_SECONDS <= moment:
        return refuse("the token has expired")
    nbf = payload.get("nbf")
    if isinstance(nbf, int | float) and nbf - CLOCK_SKEW_SECONDS > moment:
        return refuse("the token is not valid yet")
    return None
