"""What one caller can cost the agent: failed authentications per peer address, calls per
identity, and a cheap first look at a token before the API server is asked about it (EA-105,
EA-107, EA-120..EA-122).

`TokenBuckets`: the one token bucket behind both limits, by key. A bucket holds `burst` and
refills at `rate` per second; `admit` takes a token or refuses with RESOURCE_EXHAUSTED
(`limit: ...`), `succeeded` gives one back. A refused call is answered once the bucket would
hold a token again, but after at most `MAX_HOLD_SECONDS` (`TokenBuckets.turn_away`): a caller
that sends one call after another on a connection is slowed to the bucket's rate instead of
making the agent refuse thousands of calls a second, which on a busy Host takes the CPU its
Holders' execs need. At most `max_held` calls are held so at once per limit; beyond that they
are refused at once. At most `max_keys` buckets are kept: when a new key would exceed that, the
fullest bucket goes (a full bucket is the same as none).

`FailedAuthLimiter` (EA-105): a bucket per peer address (the IP, not the port: a new connection
is free to make; an IPv6 address by its /64, `address_key`, since a caller picks addresses in
its /64 at will, EA-122). Every call from that peer takes one token when its authentication
starts (`admit`) and gives it back if it authenticates (`succeeded`): what stays taken are
failed authentications, and those under way, so calls sent all at once cannot outrun the
bucket. While it is empty, every call from that peer is refused before any TokenReview or claim
read, whatever it carries. So one address has at most `burst` authentications under way at any
moment. Callers behind one address (a NAT) share its bucket; a Holder whose calls fail again and
again is slowed down too.

`IdentityLimiter` (EA-120, EA-121): a bucket per identity a TokenReview named (the reviewed user,
`system:serviceaccount:<ns>:<name>` for a Holder). Every call of that identity takes a token,
whether it is then answered or refused (`ServerInfo`, and `GetMicroVM` and `ExecCommand` refused
by any later check, all count): any ServiceAccount can mint a token for the agent's audience,
and each of its calls costs a TokenReview made fresh past the API server's cache, and a claim
read. The identity is known for sure only after the review. Before it, the pre-limit is keyed by
the token string itself: the agent remembers (by digest) which identity a review named for each
token, and a call carrying a remembered token takes that identity's token before the review is
asked for, or is refused (and held) without a review while the bucket is empty. Keyed so, the
pre-limit cannot be turned against another identity: only a call carrying that very token
string, which is that identity's credential, ever spends or consults its bucket. Keying it by
the token's unverified `sub` instead would let anyone write a token naming a victim's
ServiceAccount: spending the victim's bucket would starve the victim, and even only looking at it
(refusing early while it is empty) would tell the writer how busy the victim is. What the token
key leaves open: an identity that mints a fresh token for every call gets each one reviewed
once; the review's answer still spends its bucket (and refuses the call while it is empty), and
each fresh token costs it a TokenRequest, which the API server limits on its own. Calls that
arrive all at once with a token not yet remembered can each reach the review before the first
answer comes (at most one per call under way); after that, none can.

`token_precheck`: the token's own, unverified, claims must name the agent's audience and not be
expired (nor valid only later); else the call is UNAUTHENTICATED without a TokenReview. This is
no verification (anyone can write such a token): it only keeps strings that cannot pass from
costing the API server anything. The TokenReview still decides.

Time is the injected `Clock`'s monotonic reading for the buckets, the wall clock for the token.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import grpc

from batteryop.api.clock import SYSTEM_CLOCK, Clock
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


IPV6_PREFIX: Final = 64
"""The IPv6 prefix one caller is counted by: a Host, a Pod's node or a home network is given a
/64 (or more) and picks addresses in it at will."""


def address_key(address: str) -> str:
    """The key an address's bucket is kept under: an IPv4 address (also one mapped into IPv6)
    as it is, an IPv6 address as its /64 (`2001:db8:1:2::/64`), anything else as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)


def peer_key(peer: str | None) -> str:
    """The bucket key of a gRPC peer string (`peer_address`, then `address_key`)."""
    return address_key(peer_address(peer))


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """Token buckets by key (an address, an identity): each holds `burst` and refills at
    `rate` per second. `admit` takes a token or refuses, `succeeded` gives one back, `check`
    and `turn_away` look without taking. At most `max_keys` buckets are kept: when a new key
    would exceed that, the fullest bucket goes (a full bucket is the same as none). At most
    `max_held` refused calls are held at once (`turn_away`). Subclasses word the refusal
    (`describe`)."""

    def __init__(
        self,
        *,
        burst: int,
        rate: float,
        max_keys: int = 4096,
        max_held: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._burst = float(burst)
        self._rate = rate
        self._max_keys = max_keys
        self._max_held = max_held
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, _Bucket] = {}
        self.held = 0
        """Refused calls being held now (see the module docstring)."""

    def describe(self, key: str, wait: float) -> str:
        """The refusal's detail for `key`, whose bucket holds a token again in `wait` s."""
        return f"too many calls; try again in {wait:.1f}s"

    async def turn_away(self, key: str) -> RefusedError | None:
        """None if a call keyed `key` may go on; else its refusal, after holding it until the
        bucket would hold a token (at most `MAX_HOLD_SECONDS`) unless too many are held."""
        refusal = self.check(key)
        if refusal is None or self.held >= self._max_held:
            return refusal
        bucket = self._buckets[key]
        wait = (1.0 - self._level(bucket, self._clock.monotonic())) / self._rate
        self.held += 1
        try:
            await self._sleep(min(wait, MAX_HOLD_SECONDS))
        finally:
            self.held -= 1
        return refusal

    def _level(self, bucket: _Bucket, now: float) -> float:
        return min(self._burst, bucket.tokens + (now - bucket.at) * self._rate)

    def check(self, key: str) -> RefusedError | None:
        """The refusal `admit` would raise for `key` now, without taking anything."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        level = self._level(bucket, self._clock.monotonic())
        return None if level >= 1.0 else self._refusal(key, level)

    def _refusal(self, key: str, level: float) -> RefusedError:
        wait = (1.0 - level) / self._rate
        return RefusedError(RESOURCE_EXHAUSTED, Check.LIMIT, self.describe(key, wait))

    def admit(self, key: str) -> None:
        """Take a token for a call keyed `key`; RefusedError(RESOURCE_EXHAUSTED) while its
        bucket is empty."""
        now = self._clock.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                fullest = max(self._buckets, key=lambda k: self._level(self._buckets[k], now))
                del self._buckets[fullest]
            bucket = self._buckets[key] = _Bucket(self._burst, now)
        level = self._level(bucket, now)
        if level < 1.0:
            raise self._refusal(key, level)
        bucket.tokens, bucket.at = level - 1.0, now

    def succeeded(self, key: str) -> None:
        """The call `admit` took a token for is not to be counted: give the token back."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            now = self._clock.monotonic()
            bucket.tokens, bucket.at = min(self._burst, self._level(bucket, now) + 1.0), now

    @property
    def keys(self) -> int:
        """How many keys have a bucket (bounded by `max_keys`)."""
        return len(self._buckets)


class FailedAuthLimiter(TokenBuckets):
    """Per-address token buckets of failed authentications (EA-105; the module docstring)."""

    def __init__(
        self,
        *,
        burst: int,
        rate: float,
        max_peers: int = 4096,
        max_held: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            burst=burst, rate=rate, max_keys=max_peers, max_held=max_held, clock=clock, sleep=sleep
        )

    def describe(self, key: str, wait: float) -> str:
        return f"too many failed authentications from this address; try again in {wait:.1f}s"

    @property
    def peers(self) -> int:
        """How many peers have a bucket (bounded by `max_peers`)."""
        return self.keys


class IdentityLimiter:
    """Calls per reviewed identity (EA-120), and its cheap look before the review (EA-121).

    Each identity a TokenReview named has a bucket (`burst`, refilling at `rate` per second);
    every call of that identity takes a token, whatever becomes of the call afterwards, and is
    refused with RESOURCE_EXHAUSTED while the bucket is empty. The identity is known for sure
    only after the review, so the agent also remembers which identity a review named for each
    token string (a digest of it; at most `max_tokens`, the oldest forgotten first):

    - `turn_away(token)`: before anything else, the refusal (held as `TokenBuckets.turn_away`
      holds it) when this very token's identity has an empty bucket; None otherwise.
    - `before_review(token)`: takes the token of this very token's identity, if it is known,
      before the review is asked for (so calls sent all at once cannot all reach the review);
      returns that identity, or None.
    - `after_review(token, username, taken)`: remembers the token as `username`'s, and takes
      `username`'s token unless `before_review` already took it.

    See the module docstring for why the key before the review is the token and not its
    unverified subject.
    """

    def __init__(
        self,
        *,
        burst: int,
        rate: float,
        max_identities: int = 4096,
        max_tokens: int = 4096,
        max_held: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.buckets = _IdentityBuckets(
            burst=burst,
            rate=rate,
            max_keys=max_identities,
            max_held=max_held,
            clock=clock,
            sleep=sleep,
        )
        self._max_tokens = max_tokens
        self._tokens: collections.OrderedDict[bytes, str] = collections.OrderedDict()

    @staticmethod
    def _digest(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def identity_of(self, token: str) -> str | None:
        """The identity a review named for this very token, if it is remembered."""
        return self._tokens.get(self._digest(token))

    async def turn_away(self, token: str) -> RefusedError | None:
        username = self.identity_of(token)
        if username is None:
            return None
        return await self.buckets.turn_away(username)

    def before_review(self, token: str) -> str | None:
        username = self.identity_of(token)
        if username is not None:
            self.buckets.admit(username)  # EA-121: refused here, no review
        return username

    def after_review(self, token: str, username: str, taken: str | None) -> None:
        digest = self._digest(token)
        self._tokens[digest] = username
        self._tokens.move_to_end(digest)
        while len(self._tokens) > self._max_tokens:
            self._tokens.popitem(last=False)
        if taken == username:
            return
        if taken is not None:  # not for this identity after all: not its call
            self.buckets.succeeded(taken)
        self.buckets.admit(username)  # EA-120: spent whatever becomes of the call


class _IdentityBuckets(TokenBuckets):
    def describe(self, key: str, wait: float) -> str:
        return f"calls per identity: too many calls by {key}; try again in {wait:.1f}s"


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
