"""The exec streams running on this agent, and the claims that let them run (EA-105, EA-106).

An exec stream is authorized at its start (`auth`); `ClaimStreams` keeps it authorized for as
long as it runs. Every running stream is admitted here, by claim, and ends with a refusal the
moment its claim no longer lets it run:

- One watch of all MicroVMClaims (`kube.informer.list_watch`), shared by every stream, started
  by `run()`. An event for a claim with running streams that no longer looks Bound on this
  Host (another phase, being deleted, deleted, another uid, another Host), or a list that no
  longer holds it, makes the agent read the claim fresh and run the checks of `auth` again
  (`Authorizer.judge`); the event alone decides nothing, since a watch may lag a fresh read.
  If the checks fail, or the claim cannot be read, every stream of the claim ends with that
  refusal (PERMISSION_DENIED `claim: ...` or UNAVAILABLE `claim lookup: ...`), its command
  cancelled on flintlockd at once, whether or not its caller reads (the stream's `end`,
  `relay._Ending`, EA-115).
- A timer per claim at its `status.leaseExpiresAt` (until the operator recorded it, at the end
  of the grace after the bind, `ClaimStatus.lease_good_until`), moved by every event that
  carries a new expiry (the first one read, a renewal). When it fires the claim is read and checked in the same way: a lease
  renewed meanwhile keeps the streams running, an expired one ends them. So even with the
  watch down (the API server unreachable) no stream outlives its lease.

Limits: at most `max_streams` streams run at once on the agent, `max_per_claim` per claim, and
`max_per_holder` per Holder (the reviewed user running them, across all its claims: one
identity holding many claims cannot take every stream of the agent, EA-123); a stream beyond any
of them is refused with RESOURCE_EXHAUSTED (`limit: ...`) before flintlockd is asked anything.
`max_streams` streams' worst-case memory fits the agent's budget (`memory`, EA-116).

    streams = ClaimStreams(authorizer, max_streams=93, max_per_claim=16, max_per_holder=64)
    stream = streams.admit(caller, claim, microvm_uid, end=outbox.fail)   # after `authorize`
    ...
    streams.release(stream)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import grpc

from batteryop.api.claim import MicroVMClaim
from batteryop.api.conditions import ClaimPhase
from batteryop.api.errors import MalformedObjectError
from batteryop.exec_agent.auth import Authorizer, Caller
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.kube.client import Objects
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CLAIMS

log = logging.getLogger(__name__)

RESOURCE_EXHAUSTED: Final = grpc.StatusCode.RESOURCE_EXHAUSTED

Key = tuple[str, str]
"""(namespace, name) of a claim."""


@dataclass(eq=False)
class Stream:
    """One running exec stream, as admitted."""

    key: Key
    claim_uid: str
    caller: Caller
    microvm_uid: str
    end: Callable[[RefusedError], None]
    """Ends the stream with a refusal (the relay sends it as the call's status)."""
    ended: RefusedError | None = None


@dataclass(eq=False)
class _Claim:
    """What is known of one claim with running streams."""

    streams: set[Stream] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None
    check: asyncio.Task[None] | None = None
    again: bool = False
    """Something changed while a check was under way: check once more after it."""


class ClaimStreams:
    """Running streams by claim; ends them when their claim stops allowing them (module doc)."""

    def __init__(
        self,
        authorizer: Authorizer,
        *,
        max_streams: int,
        max_per_claim: int,
        max_per_holder: int | None = None,
    ) -> None:
        self._authorizer = authorizer
        self._max_streams = max_streams
        self._max_per_claim = max_per_claim
        self._max_per_holder = max_streams if max_per_holder is None else max_per_holder
        self._claims: dict[Key, _Claim] = {}
        self._holders: dict[str, int] = {}
        """Running streams by the Holder (reviewed user) that runs them (EA-123)."""
        self._count = 0
        self.checks = 0
        """Fresh reads of a claim made for running streams (for tests and metrics)."""

    @property
    def running(self) -> int:
        return self._count

    def running_for(self, holder: str) -> int:
        """Streams running for the Holder (reviewed user) `holder` (EA-123)."""
        return self._holders.get(holder, 0)

    # -- streams -----------------------------------------------------------------------------

    def admit(
        self,
        caller: Caller,
        claim: MicroVMClaim,
        microvm_uid: str,
        *,
        end: Callable[[RefusedError], None],
    ) -> Stream:
        """A slot for a stream `authorize` let run on `claim`; RefusedError when none is free."""
        key = (claim.metadata.namespace, claim.metadata.name)
        entry = self._claims.get(key)
        if self._count >= self._max_streams:
            raise RefusedError(
                RESOURCE_EXHAUSTED,
                Check.LIMIT,
                f"the agent runs {self._max_streams} streams already; try again later",
            )
        if entry is not None and len(entry.streams) >= self._max_per_claim:
            raise RefusedError(
                RESOURCE_EXHAUSTED,
                Check.LIMIT,
                f"claim {key[0]}/{key[1]} runs {self._max_per_claim} streams already",
            )
        holder = caller.username
        if self._holders.get(holder, 0) >= self._max_per_holder:  # EA-123
            raise RefusedError(
                RESOURCE_EXHAUSTED,
                Check.LIMIT,
                f"streams per Holder: {holder} runs {self._max_per_holder} streams already",
            )
        if entry is None:
            entry = self._claims[key] = _Claim()
        stream = Stream(key, claim.metadata.uid, caller, microvm_uid, end)
        entry.streams.add(stream)
        self._count += 1
        self._holders[holder] = self._holders.get(holder, 0) + 1
        self._expire_at(key, entry, claim)
        return stream

    def release(self, stream: Stream) -> None:
        """The stream ended (any way): free its slot."""
        entry = self._claims.get(stream.key)
        if entry is None or stream not in entry.streams:
            return
        entry.streams.discard(stream)
        self._count -= 1
        holder = stream.caller.username
        left = self._holders.get(holder, 0) - 1
        if left > 0:
            self._holders[holder] = left
        else:
            self._holders.pop(holder, None)
        if not entry.streams:
            if entry.timer is not None:
                entry.timer.cancel()
            if entry.check is not None:
                entry.check.cancel()
            del self._claims[stream.key]

    # -- the claims --------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow every claim until cancelled (run it under a supervisor)."""
        await list_watch(self._authorizer.kube, CLAIMS, on_list=self._listed, on_event=self._event)

    def _listed(self, items: Objects) -> None:
        seen = {_key(o): o for o in items}
        for key in list(self._claims):
            body = seen.get(key)
            if body is None or not self._looks_fine(key, body):
                self._recheck(key)
            else:
                self._renewed(key, body)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        if key not in self._claims:
            return
        if kind == "DELETED" or not self._looks_fine(key, obj):
            self._recheck(key)
        else:
            self._renewed(key, obj)

    def _looks_fine(self, key: Key, body: Mapping[str, Any]) -> bool:
        """Whether a watched `body` still looks like it lets the claim's streams run."""
        try:
            claim = MicroVMClaim.from_dict(body)
        except MalformedObjectError:
            return False
        status = claim.status
        return (
            not claim.metadata.deleting
            and status.phase == ClaimPhase.BOUND
            and status.node_name == self._authorizer.node_name
            and all(s.claim_uid == claim.metadata.uid for s in self._claims[key].streams)
            and all(s.microvm_uid == status.microvm_uid for s in self._claims[key].streams)
        )

    def _renewed(self, key: Key, body: Mapping[str, Any]) -> None:
        entry = self._claims.get(key)
        if entry is not None:
            self._expire_at(key, entry, MicroVMClaim.from_dict(body))

    def _expire_at(self, key: Key, entry: _Claim, claim: MicroVMClaim) -> None:
        """The claim's timer at its lease expiry (EA-106; before the operator recorded it, the
        end of `lease_good_until`'s grace); now if the claim records neither."""
        if entry.timer is not None:
            entry.timer.cancel()
        expires = claim.status.lease_good_until()
        delay = 0.0
        if expires is not None:
            delay = max(0.0, (expires - self._authorizer.now()).total_seconds())
        entry.timer = asyncio.get_running_loop().call_later(delay, self._recheck, key)

    def _recheck(self, key: Key) -> None:
        """Read claim `key` fresh and judge its streams again (one check at a time)."""
        entry = self._claims.get(key)
        if entry is None:
            return
        if entry.check is not None and not entry.check.done():
            entry.again = True
            return
        entry.check = asyncio.create_task(self._check(key, entry))

    async def _check(self, key: Key, entry: _Claim) -> None:
        while True:
            entry.again = False
            self.checks += 1
            try:
                body = await self._authorizer.fetch_claim(*key)
            except RefusedError as e:
                for stream in list(entry.streams):
                    self._end(stream, e)
                return
            claim: MicroVMClaim | None = None
            for stream in list(entry.streams):
                try:
                    claim = self._authorizer.judge(stream.caller, body, stream.microvm_uid)
                    if claim.metadata.uid != stream.claim_uid:
                        raise RefusedError(
                            grpc.StatusCode.PERMISSION_DENIED,
                            Check.CLAIM,
                            f"claim {key[0]}/{key[1]} was deleted and created again",
                        )
                except RefusedError as e:
                    self._end(stream, e)
            if claim is not None and entry.streams:
                self._expire_at(key, entry, claim)
            if not entry.again:
                return

    def _end(self, stream: Stream, refusal: RefusedError) -> None:
        if stream.ended is not None:
            return
        ended = RefusedError(
            refusal.code, refusal.check, f"{refusal.detail}; the running command was ended"
        )
        stream.ended = ended
        log.info(
            "Ended an exec stream: its claim no longer allows it",
            extra={
                "claim": f"{stream.key[0]}/{stream.key[1]}",
                "check": str(refusal.check),
                "code": refusal.code.name,
                "detail": refusal.detail,
            },
        )
        stream.end(ended)


def _key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
