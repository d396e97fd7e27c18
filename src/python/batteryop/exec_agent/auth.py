"""Who may run what: the agent's authorization of every call, with no cache (EA-010..EA-014).

How a call names its claim. flintlock's exec API carries only the MicroVM's uid (`ExecStart.uid`,
`GetMicroVMRequest.uid`), and clients that already speak it must work unchanged plus a bearer
token (EA-003). So the claim is not named by the request: it is named by the token. A Holder's
token is minted by TokenRequest bound to its claim's Secret `<claim>-exec`, so the claim
is that Secret's name without `-exec`, in the Secret's namespace; the request's MicroVM uid must
then be the one that claim holds. A token can therefore only ever reach the one claim it was
minted for, and a refusal only ever talks about that claim or the caller's own input.

The checks, in order; the first that fails refuses the call (`RefusedError`, named by `Check`):

0. `limit` (EA-105): the caller's address (an IPv6 one by its /64, EA-122) has not used up its
   failed authentications (`limits.FailedAuthLimiter`), else RESOURCE_EXHAUSTED at once. Every
   UNAUTHENTICATED refusal below keeps the token its call took from that address's bucket.
   Then (EA-121) when a review already named the identity of this very token string, that
   identity's bucket of calls (`limits.IdentityLimiter`) must hold a token, which the call
   takes now, else RESOURCE_EXHAUSTED without a review.
1. `bearer token`: exactly one `authorization: Bearer <token>` metadata entry, whose
   unverified payload names the agent's audience and is not expired (`limits.token_precheck`,
   EA-107), else UNAUTHENTICATED, without asking the API server anything.
2. `token review`: a TokenReview with the agent's audience (EA-010). Not authenticated, no user,
   or the audience not among those the review confirms: UNAUTHENTICATED. The review cannot be
   made (API server unreachable, slow, refusing the agent): UNAVAILABLE (EA-014). The review
   also asks for a second audience no token carries, new for every review
   (`review_audiences`): kube-apiserver keeps a successful review for 10 s keyed by the
   token and the audiences asked for, so without it a token reviewed once would pass for
   those 10 s after its Secret was deleted or re-created; with it, every review is judged
   against the Secret as the API server holds it now. The review answers with the audiences
   the token actually has, which must include the agent's. The reviewed user then takes a
   token of its bucket of calls, unless step 0 took it (EA-120): RESOURCE_EXHAUSTED
   `limit: calls per identity: ...` while it is empty. Whatever the later steps decide, the
   call has spent it.
3. `token binding` (EA-012): TokenReview reports no Secret binding, so the token's payload is
   read (its signature was just vouched for by the review of this very string): its
   `kubernetes.io` claim must name a Secret with a uid, in a namespace, the Secret's name must be
   `<claim>-exec`, `sub` must be the reviewed user, and when the review reports a credential id
   (`authentication.kubernetes.io/credential-id`, `JTI=<jti>`), it must be this token's `jti`.
   The uid half of "by name and uid" is the API server's: a bound token whose Secret is gone, or
   was re-created under the same name (a new uid), fails the review itself, at once thanks to
   the review's second audience (step 2); the agent has no access to Secrets and gets none
   for this (a grant to read Secrets in every namespace, on every Host, would be worse than
   the gap it closes). Otherwise PERMISSION_DENIED.
4. `claim lookup` (EA-014): the claim is read from the API server for every call (`get`, never a
   cache or watch). Not found: PERMISSION_DENIED; the read cannot complete: UNAVAILABLE.
5. `holder` (EA-011): the reviewed user is `system:serviceaccount:<claim ns>:<serviceAccountName>`,
   else PERMISSION_DENIED; and `token binding` again (EA-012): the token was issued (`iat`, or
   `nbf` when later) no earlier than the claim was created, else PERMISSION_DENIED: a token
   minted for an earlier claim of the same name, whose Secret was bound the same way, never
   reaches the new one.
6. `claim` (EA-013): not being deleted, phase Bound, its Lease unexpired
   (`ClaimStatus.lease_good_until`: `leaseExpiresAt` in the future, or, until the operator
   recorded it, a moment after `boundTime` that battery's expiry cannot be before),
   `status.microVM.uid` the requested uid, `status.host.nodeName` this Host; else
   PERMISSION_DENIED.

`ServerInfo` needs steps 0-2 only; `GetMicroVM` and `ExecCommand` need all of them. No token is
ever logged or put in a message. While an exec stream runs, `streams.ClaimStreams` runs steps
4-6 again whenever the claim looks changed, and ends the stream when they fail (EA-106).

Latency: for `GetMicroVM` and `ExecCommand` the claim read of step 4 starts beside the review of
step 2, for the claim the (not yet reviewed) token names; its answer is used only once the
review authenticated that same token and the binding of step 3 names that same claim, and it is
dropped otherwise. Only a token that passes step 1 costs a review and a claim read; one whose
review fails costs its address a token of its bucket (step 0); one whose review passes costs its
identity a token of its bucket (step 2).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

import grpc

from batteryop.api import names
from batteryop.api.claim import MicroVMClaim
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.conditions import ClaimPhase
from batteryop.api.errors import MalformedObjectError
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.exec_agent.limits import (
    FailedAuthLimiter,
    IdentityLimiter,
    peer_key,
    token_precheck,
)
from batteryop.exec_agent.timing import Phase, PhaseObserver, observe
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import KubeError, NotFoundError
from batteryop.kube.resources import CLAIMS, TOKEN_REVIEWS
from batteryop.kube.tokens import token_payload

CREDENTIAL_ID_EXTRA: Final = names.CREDENTIAL_ID_EXTRA
"""TokenReview `user.extra` key of a service-account token's `JTI=<jti>` (Kubernetes 1.29+)."""

AUTHORIZATION_METADATA: Final = "authorization"
BEARER_SCHEME: Final = "bearer"

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class SecretBinding:
    """The Secret a service-account token was minted bound to (its `kubernetes.io` claim)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ClaimRead:
    """The read of claim `namespace/name` from the API server, under way for one call."""

    namespace: str
    name: str
    task: asyncio.Future[Mapping[str, Any]]


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the user the API server reviewed, and the token's binding."""

    username: str
    binding: SecretBinding | None = None
    binding_problem: str = ""
    """Why the token's payload names no usable binding (empty when `binding` is set)."""
    groups: tuple[str, ...] = field(default=())
    claim_read: ClaimRead | None = field(default=None, compare=False)
    """The claim read started beside the review (`Authorizer.authenticate(read_claim=True)`)."""
    issued_at: datetime | None = None
    """When the token became valid: the later of its `iat` and `nbf` (None: neither)."""


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The token of the one `authorization: Bearer <token>` entry; RefusedError otherwise."""
    values = [v for k, v in (metadata or ()) if k.lower() == AUTHORIZATION_METADATA]
    if not values:
        raise RefusedError(UNAUTHENTICATED, Check.BEARER_TOKEN, "no authorization metadata")
    if len(values) > 1:
        raise RefusedError(
            UNAUTHENTICATED, Check.BEARER_TOKEN, "more than one authorization metadata entry"
        )
    value = values[0]
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() != BEARER_SCHEME:
        raise RefusedError(UNAUTHENTICATED, Check.BEARER_TOKEN, "not a Bearer authorization")
    token = token.strip()
    if not token:
        raise RefusedError(UNAUTHENTICATED, Check.BEARER_TOKEN, "the Bearer token is empty")
    return token


def issued_at(payload: Mapping[str, Any] | None) -> datetime | None:
    """The later of a token payload's `iat` and `nbf`, or None when it has neither."""
    times = [
        v
        for v in ((payload or {}).get("iat"), (payload or {}).get("nbf"))
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return datetime.fromtimestamp(max(times), UTC) if times else None


def review_audiences(audience: str) -> list[str]:
    """The audiences a TokenReview asks for: the agent's, and one made up for this review
    alone, so the API server's cache of successful reviews never answers it (step 2)."""
    return [audience, f"{audience}/review-{uuid.uuid4().hex}"]


def read_binding(
    token: str, username: str, extra: Mapping[str, Any]
) -> tuple[SecretBinding | None, str]:
    """The Secret binding of a reviewed token, or (None, why not). See step 3 of the module."""
    payload = token_payload(token)
    if payload is None:
        return None, "the token is not a service account token"
    if payload.get("sub") != username:
        return None, "the token's subject is not the reviewed user"
    credential_ids = extra.get(CREDENTIAL_ID_EXTRA)
    if credential_ids:
        jti = payload.get("jti")
        if not isinstance(jti, str) or list(credential_ids) != [f"JTI={jti}"]:
            return None, "the token's id is not the one the review reports"
    scope = payload.get("kubernetes.io")
    if not isinstance(scope, Mapping):
        return None, "the token carries no Kubernetes binding"
    secret = scope.get("secret")
    namespace = scope.get("namespace")
    if not isinstance(secret, Mapping):
        return None, "the token is not bound to a Secret"
    name, uid = secret.get("name"), secret.get("uid")
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        return None, "the token's Secret binding names no Secret"
    if not isinstance(uid, str) or not uid:
        return None, f"the token's binding to Secret {namespace}/{name} has no uid"
    return SecretBinding(namespace=namespace, name=name, uid=uid), ""


class Authorizer:
    """Runs the checks of the module docstring against the API server, for every call.

    `kube` acts as the agent's identity, which needs `create tokenreviews` and `get
    microvmclaims`; its timeout bounds every request (EA-014). `clock` is the clock the lease
    expiry is judged by.
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        node_name: str,
        audience: str = names.EXEC_AGENT_AUDIENCE,
        clock: Clock = SYSTEM_CLOCK,
        observer: PhaseObserver | None = None,
        limiter: FailedAuthLimiter | None = None,
        identities: IdentityLimiter | None = None,
    ) -> None:
        self._kube = kube
        self._node_name = node_name
        self._audience = audience
        self._clock = clock
        self._observer = observer
        self._limiter = limiter
        self._identities = identities

    @property
    def kube(self) -> KubeClient:
        """The agent's API client (its own identity)."""
        return self._kube

    @property
    def node_name(self) -> str:
        return self._node_name

    def now(self) -> datetime:
        """The wall clock leases are judged by."""
        return self._clock.now()

    async def authenticate(
        self,
        metadata: Iterable[tuple[str, str | bytes]] | None,
        *,
        read_claim: bool = False,
        peer: str | None = None,
    ) -> Caller:
        """Steps 0-2 (and reading the binding for step 3): who the caller is (EA-010).

        `peer` is the call's gRPC peer (`context.peer()`), whose address the failed
        authentications are counted by (step 0). With `read_claim`, the read of the claim the
        token names (step 4) starts now, beside the TokenReview instead of after it, and
        `authorize` uses its answer. It is still a fresh read for this call; its answer is
        never looked at unless the review authenticates this very token, and the read is
        cancelled when it does not.
        """
        refused = await self.turn_away(peer, metadata)
        if refused is not None:
            raise refused
        if self._limiter is None:
            return await self._authenticate(metadata, read_claim=read_claim)
        address = peer_key(peer)
        self._limiter.admit(address)  # EA-105: a token now, back only if this authenticates
        failed = False
        try:
            return await self._authenticate(metadata, read_claim=read_claim)
        except RefusedError as e:
            failed = e.code == UNAUTHENTICATED  # not UNAVAILABLE: the API server's failure
            raise
        finally:
            if not failed:
                self._limiter.succeeded(address)

    async def turn_away(
        self, peer: str | None, metadata: Iterable[tuple[str, str | bytes]] | None = None
    ) -> RefusedError | None:
        """Step 0 alone, taking nothing: the refusal a call from `peer` with `metadata` gets,
        once it has been held (`limits.TokenBuckets.turn_away`); None when it may go on. The
        caller's address first (EA-105), then the identity a review already named for this
        very token (EA-121)."""
        if self._limiter is not None:
            refused = await self._limiter.turn_away(peer_key(peer))  # EA-105, EA-122
            if refused is not None:
                return refused
        if self._identities is not None and metadata is not None:
            try:
                token = bearer_token(metadata)
            except RefusedError:
                return None  # step 1 refuses it, and counts it against the address
            return await self._identities.turn_away(token)  # EA-121
        return None

    async def _authenticate(
        self, metadata: Iterable[tuple[str, str | bytes]] | None, *, read_claim: bool
    ) -> Caller:
        token = bearer_token(metadata)
        payload = token_payload(token)
        refused = token_precheck(payload, audience=self._audience, now=self._clock.now())  # EA-107
        if refused is not None:
            raise refused
        review = {
            "apiVersion": TOKEN_REVIEWS.api_version,
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": review_audiences(self._audience)},
        }
        taken = None if self._identities is None else self._identities.before_review(token)
        claim_read = self._start_claim_read(token) if read_claim else None
        try:
            caller = await self._review(token, review)
            if self._identities is not None:
                self._identities.after_review(token, caller.username, taken)  # EA-120
        except BaseException:
            if claim_read is not None:
                claim_read.task.cancel()
            raise
        return replace(caller, claim_read=claim_read, issued_at=issued_at(payload))

    async def _review(self, token: str, review: Mapping[str, Any]) -> Caller:
        started = time.perf_counter()
        try:
            answer = await self._kube.create(TOKEN_REVIEWS, review)
        except KubeError as e:
            # EA-014: no review, no call. The server's reason, never the request body.
            raise RefusedError(
                UNAVAILABLE, Check.TOKEN_REVIEW, f"the review could not be made ({e.reason})"
            ) from e
        finally:
            observe(self._observer, Phase.TOKEN_REVIEW, started)
        status = answer.get("status") or {}
        user = status.get("user") or {}
        username = user.get("username") if isinstance(user, Mapping) else None
        if not status.get("authenticated") or not isinstance(username, str) or not username:
            raise RefusedError(
                UNAUTHENTICATED, Check.TOKEN_REVIEW, "the API server did not authenticate the token"
            )
        if self._audience not in (status.get("audiences") or ()):
            raise RefusedError(
                UNAUTHENTICATED,
                Check.TOKEN_REVIEW,
                f"the token is not for audience {self._audience}",
            )
        extra = user.get("extra") or {}
        binding, problem = read_binding(
            token, username, extra if isinstance(extra, Mapping) else {}
        )
        groups = user.get("groups") or ()
        return Caller(
            username=username,
            binding=binding,
            binding_problem=problem,
            groups=tuple(str(g) for g in groups),
        )

    def _start_claim_read(self, token: str) -> ClaimRead | None:
        """The read of the claim an (unreviewed) token names, started; None if it names none."""
        payload = token_payload(token)
        scope = payload.get("kubernetes.io") if payload is not None else None
        secret = scope.get("secret") if isinstance(scope, Mapping) else None
        namespace = scope.get("namespace") if isinstance(scope, Mapping) else None
        name = secret.get("name") if isinstance(secret, Mapping) else None
        if not (isinstance(namespace, str) and namespace and isinstance(name, str)):
            return None
        claim = names.claim_of_exec_secret(name)
        if claim is None:
            return None
        task = asyncio.ensure_future(self._read_claim(namespace, claim))
        # Never "exception was never retrieved": the answer may be dropped on purpose.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return ClaimRead(namespace=namespace, name=claim, task=task)

    async def _read_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        started = time.perf_counter()
        try:
            return await self._kube.get(CLAIMS, name, namespace)
        finally:
            observe(self._observer, Phase.CLAIM_READ, started)

    async def authorize(self, caller: Caller, microvm_uid: str) -> MicroVMClaim:
        """Steps 3-6: the claim that lets `caller` use MicroVM `microvm_uid` on this Host."""
        namespace, claim_name = self.claim_of(caller)
        started = caller.claim_read
        if started is not None and (started.namespace, started.name) == (namespace, claim_name):
            body = await self.fetch_claim(namespace, claim_name, started.task)
        else:
            body = await self.fetch_claim(namespace, claim_name)
        return self.judge(caller, body, microvm_uid)

    def claim_of(self, caller: Caller) -> tuple[str, str]:
        """Step 3: (namespace, name) of the claim the caller's token is bound to."""
        binding = caller.binding
        if binding is None:
            raise RefusedError(PERMISSION_DENIED, Check.TOKEN_BINDING, caller.binding_problem)
        claim_name = names.claim_of_exec_secret(binding.name)
        if claim_name is None:
            raise RefusedError(
                PERMISSION_DENIED,
                Check.TOKEN_BINDING,
                f"the token is bound to Secret {binding.namespace}/{binding.name}, "
                f"which is no claim's {names.EXEC_SECRET_SUFFIX} Secret",
            )
        return binding.namespace, claim_name

    async def fetch_claim(
        self,
        namespace: str,
        name: str,
        started: asyncio.Future[Mapping[str, Any]] | None = None,
    ) -> Mapping[str, Any]:
        """Step 4: claim `namespace/name` from the API server (or the read `started` for it)."""
        where = f"{namespace}/{name}"
        try:
            return await (started if started is not None else self._read_claim(namespace, name))
        except NotFoundError:
            raise RefusedError(
                PERMISSION_DENIED, Check.CLAIM_LOOKUP, f"there is no claim {where}"
            ) from None
        except KubeError as e:
            raise RefusedError(
                UNAVAILABLE, Check.CLAIM_LOOKUP, f"claim {where} could not be read ({e.reason})"
            ) from e

    def judge(self, caller: Caller, body: Mapping[str, Any], microvm_uid: str) -> MicroVMClaim:
        """Steps 5-6 on the claim `body` the caller's token is bound to (see `claim_of`)."""
        namespace, claim_name = self.claim_of(caller)
        where = f"{namespace}/{claim_name}"
        try:
            claim = MicroVMClaim.from_dict(body)
        except MalformedObjectError as e:
            raise RefusedError(
                PERMISSION_DENIED, Check.CLAIM, f"claim {where} is unreadable ({e.path})"
            ) from e
        if caller.username != claim.holder:  # EA-011
            raise RefusedError(
                PERMISSION_DENIED,
                Check.HOLDER,
                f"{caller.username} is not the Holder of claim {where}",
            )
        created = claim.metadata.creation_timestamp
        if created is not None and (caller.issued_at is None or caller.issued_at < created):
            # EA-012: a token from before this claim was minted for another claim's Secret.
            raise RefusedError(
                PERMISSION_DENIED,
                Check.TOKEN_BINDING,
                f"the token was issued before claim {where} was created",
            )
        self._check_claim(claim, where, microvm_uid)
        return claim

    def _check_claim(self, claim: MicroVMClaim, where: str, microvm_uid: str) -> None:
        """EA-013: Bound, unexpired, this MicroVM, this Host."""
        status = claim.status

        def deny(detail: str) -> RefusedError:
            return RefusedError(PERMISSION_DENIED, Check.CLAIM, f"claim {where} {detail}")

        if claim.metadata.deleting:
            raise deny("is being released")
        if status.phase != ClaimPhase.BOUND:
            raise deny(f"is {status.phase or 'not yet Bound'}, not Bound")
        good_until = status.lease_good_until()
        if good_until is None or good_until <= self._clock.now():
            # Without a recorded expiry the Lease is known to live only a moment past the bind.
            raise deny(
                "has an expired lease" if status.lease_expires_at else "has no lease expiry yet"
            )
        if not microvm_uid or status.microvm_uid != microvm_uid:
            raise deny(f"does not hold microvm {microvm_uid!r}")
        if status.node_name != self._node_name:
            raise deny(f"is not on Host {self._node_name}")
