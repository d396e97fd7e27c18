"""`AsyncClient` and `AsyncClaim`: the client's IO, on asyncio (the sync side wraps these).

Kubernetes is reached through the project's own `batteryop.kube.KubeClient`, not the
`kubernetes` package: it is async (the `kubernetes` package is sync-only, and its asyncio twin
is a separate, heavier package), it already maps API failures to a small error tree, it
watches, and it brings only PyYAML into the wheel (its HTTP is the standard library's asyncio
streams, `batteryop.kube.http`). It never imports kopf.

A claim's life here:
- `AsyncClient.claim` creates the claim and then its empty, owned `<claim>-exec` Secret
  (CC-001), watches the claim from the create's resourceVersion until it is Bound (CC-003),
  calling `on_pending` each time the Bound condition's reason or message changes, so an
  exhausted Pool is reported while waiting (CC-004). When the caller stops waiting (timeout,
  cancellation, any error) the claim is deleted with a uid precondition before the error is
  raised, and that delete runs even after a cancellation (CC-005).
- A returned `AsyncClaim` is held by a background task: every Pool heartbeat interval it sets
  `spec.renewTime` with the claim's uid in the same merge patch (CC-010), refreshes the bound
  token two thirds into its life (CC-011), and from each answer notices a lost lease
  (Expired, deleted, replaced; CC-012) and the first HostReady=False (CC-013), which it
  reports through callbacks and properties while it keeps holding.
- Tokens come from TokenRequest for the Holder ServiceAccount, audience the Exec Agent's, bound
  to the Secret by name and uid (CC-002); `exec` sends the current one on every call (CC-020).
- `release()` deletes the claim (uid precondition; gone already is fine) and its Secret, which
  revokes every bound token at once; it is idempotent, and `async with` calls it (CC-021).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import sys
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from batteryop.api import names
from batteryop.api._compat import TIMEOUT_ERRORS, UTC, within
from batteryop.api.claim import MicroVMClaim
from batteryop.api.closing import AsyncClosing
from batteryop.api.conditions import ClaimPhase, ClaimReason
from batteryop.api.errors import MalformedObjectError
from batteryop.client import _core
from batteryop.client._ca import CaLookup
from batteryop.client._exceptions import (
    ClaimError,
    ClaimTimeoutError,
    ClientError,
    ConfigError,
    HostNotReadyError,
    KubeAPIError,
    LeaseLostError,
    NoAgentAddressError,
    PoolExhaustedError,
    PoolNotFoundError,
)
from batteryop.client._exec import (
    ExecRequest,
    ExecTransport,
    OutputSink,
    SSHTransport,
    bytes_source,
    check_serving_ca,
)
from batteryop.client._models import (
    DEFAULT_TOKEN_EXPIRATION,
    ClaimInfo,
    ExecResult,
    Pending,
    Timeouts,
)
from batteryop.kube.client import KubeClient, WatchCursor
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import (
    ConflictError,
    InvalidError,
    KubeConfigError,
    KubeError,
    NotFoundError,
)
from batteryop.kube.resources import (
    CLAIMS,
    POOLS,
    SECRETS,
    SERVICEACCOUNTS,
    Resource,
    name_selector,
)

if TYPE_CHECKING:
    from batteryop.client._files import Source, Target
    from batteryop.client._transport import GrpcExecTransport

log = logging.getLogger("batteryop.client")

T = TypeVar("T")
PendingCallback = Callable[[Pending], "Awaitable[None] | None"]
"""Called with each new reason a claim is not Bound yet (CC-004)."""
LostCallback = Callable[[LeaseLostError], None]
"""Called once when a held claim's lease is lost (CC-012)."""
HostCallback = Callable[[HostNotReadyError], None]
"""Called the first time a held claim's Host reads HostReady=False (CC-013)."""

_GAVE_UP: tuple[type[Exception], ...] = (ClientError, *TIMEOUT_ERRORS)
"""How a bounded delete may fail: an API error, or its time ran out."""

_GRPC_TRANSPORT = "batteryop.client._transport"
"""The module of `GrpcExecTransport`, imported at the first need (gRPC with it)."""

WATCH_SECONDS = 300
"""Length of one watch request while waiting for Bound; the wait continues across them."""


@contextlib.contextmanager
def _mapped(what: str, claim: str | None = None) -> Iterator[None]:
    """Kubernetes errors become `KubeAPIError` (chained); the message names what failed."""
    try:
        yield
    except KubeConfigError as e:
        raise ConfigError(f"{what}: {e}", claim=claim) from e
    except KubeError as e:
        if isinstance(e.__cause__, KubeConfigError):  # e.g. the exec plugin failed (CC-112)
            raise ConfigError(f"{what}: {e.__cause__}", claim=claim) from e
        detail = e.message or e.reason or "no answer"
        if e.status == 0:
            detail = f"the Kubernetes API is unreachable ({detail})"
        raise KubeAPIError(f"{what}: {detail}", status=e.status, claim=claim) from e
    except MalformedObjectError as e:
        raise KubeAPIError(f"{what}: unexpected answer: {e}", claim=claim) from e


async def _call(callback: Callable[[T], Awaitable[None] | None], value: T) -> None:
    result = callback(value)
    if inspect.isawaitable(result):
        await result


def _read_ca(serving_ca: bytes | str | os.PathLike[str] | None) -> bytes | None:
    if serving_ca is None or isinstance(serving_ca, bytes):
        return serving_ca
    try:
        return Path(serving_ca).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the Exec Agent CA {serving_ca}: {e.strerror}") from e


def _load_kube_config(
    kube_config: KubeConfig | None, kubeconfig: str | os.PathLike[str] | None, context: str | None
) -> KubeConfig:
    if kube_config is not None:
        return kube_config
    try:
        if kubeconfig is not None or context is not None:
            return KubeConfig.from_kubeconfig(
                None if kubeconfig is None else str(kubeconfig), context
            )
        return KubeConfig.load()
    except KubeConfigError as e:
        raise ConfigError(f"no usable Kubernetes configuration: {e}") from e


@dataclass
class _BindProgress:
    pending: Pending | None = None
    wait_for_pool: bool = False


class AsyncClient(AsyncClosing):
    """Claims MicroVMs from Pools in one namespace, and runs commands in them.

    Kubernetes credentials: `kube_config`, else the kubeconfig file `kubeconfig` (and
    `context`), else in-cluster or `$KUBECONFIG` / `~/.kube/config`. `serving_ca` (PEM bytes, or
    a file) is the CA that signs Exec Agent serving certificates; without it (and without an
    `exec_transport`) the client reads the one the release publishes (CC-114), and `exec`
    raises `ConfigError` saying what it tried if it cannot.

    The identity needs, in `namespace`: microvmclaims create, get, list, watch, patch, delete;
    pools get; secrets create, get, delete; serviceaccounts/token create for each Holder.
    """

    def __init__(
        self,
        *,
        namespace: str = "default",
        kube_config: KubeConfig | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        serving_ca: bytes | str | os.PathLike[str] | None = None,
        token_expiration: int = DEFAULT_TOKEN_EXPIRATION,
        timeouts: Timeouts | None = None,
        exec_transport: ExecTransport | None = None,
    ) -> None:
        if token_expiration < DEFAULT_TOKEN_EXPIRATION:
            raise ConfigError(
                f"token_expiration must be at least {DEFAULT_TOKEN_EXPIRATION}s (the API minimum)"
            )
        if not namespace:
            raise ConfigError("a namespace is required")
        self.namespace = namespace
        self.timeouts = timeouts or Timeouts()
        self.token_expiration = token_expiration
        config = _load_kube_config(kube_config, kubeconfig, context)
        try:
            self._kube = KubeClient(
                config, timeout=self.timeouts.request, user_agent="battery-client"
            )
        except KubeConfigError as e:
            raise ConfigError(f"unusable Kubernetes configuration: {e}") from e
        ca = _read_ca(serving_ca)  # CC-114: none given, the release's published one
        self._ca = CaLookup(self._kube, None if ca is None else check_serving_ca(ca))
        self._transport: ExecTransport | None = exec_transport
        self._grpc: GrpcExecTransport | None = None
        self._claims: set[AsyncClaim] = set()
        self._cleanups = _Cleanups(self.timeouts.release)

    async def aclose(self) -> None:
        """Stop holding every claim this client returned (without releasing them) and close,
        after the deletes of claims a cancelled caller gave up on have finished (CC-005)."""
        for claim in list(self._claims):
            await claim.detach()
        await self._cleanups.wait()
        self._ca.cancel()
        for transport in (self._transport, self._grpc):
            if transport is not None:
                await transport.aclose()
        await self._kube.aclose()

    # -- claims ------------------------------------------------------------------------------

    async def claim(
        self,
        pool: str,
        holder: str,
        *,
        name: str | None = None,
        generate_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        on_pending: PendingCallback | None = None,
        on_lost: LostCallback | None = None,
        on_host_not_ready: HostCallback | None = None,
        timeout: float | None = None,
        wait_for_pool: bool = False,
        fallback_pools: Sequence[str] = (),
        wait_for_capacity: timedelta | None = None,
    ) -> AsyncClaim:
        """A Bound claim on `pool` held for the ServiceAccount `holder`.

        `fallback_pools`: Pools to lease from, in order, when `pool` cannot serve (CC-116;
        `AsyncClaim.pool` names the one that did). `wait_for_capacity`: the claim fails itself
        if not Bound that long after its creation (CC-117: `PoolExhaustedError`).

        Waits (by watching) up to `timeout` seconds (default `Timeouts.bind`, 300 s; None
        there: forever). A Pool that does not exist fails at once with `PoolNotFoundError`
        and no claim is left behind (CC-113; with fallback Pools: when none of them exists);
        with `wait_for_pool` the claim waits for a Pool to appear instead. When the wait ends
        without Bound (timeout, cancellation, any error), the claim is deleted before the
        error is raised: `PoolExhaustedError` if the Pool was exhausted, `PoolNotFoundError`
        if it did not exist, else `ClaimTimeoutError`.
        """
        ns = self.namespace
        pools = (pool, *fallback_pools)
        body = _core.claim_body(ns, pool, holder, name=name, generate_name=generate_name,
                                labels=labels, fallback_pools=fallback_pools,
                                wait_for_capacity=wait_for_capacity)  # fmt: skip
        pool_body = None if wait_for_pool else await self._read_pool(pools, None)
        if pool_body is None and not wait_for_pool:
            # CC-113: nothing to wait for; say so now instead of waiting out the timeout.
            raise PoolNotFoundError(f"{_missing(pools)} in namespace {ns}")
        create = asyncio.ensure_future(self._kube.create(CLAIMS, body, ns))
        try:
            with _mapped(f"creating a claim on Pool {pool}"):
                created = _core.parse_claim(await asyncio.shield(create))
        except asyncio.CancelledError:
            # CC-005: the POST may have made a claim, which only its answer names
            # (generateName); that answer is awaited and the claim deleted.
            await self._cleanups.run(self._delete_created(create), "a claim being created")
            raise
        claim_name, uid = created.metadata.name, created.metadata.uid
        progress = _BindProgress(wait_for_pool=wait_for_pool)
        limit = self.timeouts.bind if timeout is None else timeout
        held: AsyncClaim | None = None
        secret_uid: str | None = None
        first_token: asyncio.Future[_core.Token] | None = None
        try:
            # CC-001: the Secret after the claim, owned by it (its uid).
            with _mapped(f"creating Secret {names.exec_secret_name(claim_name)}", claim_name):
                secret = await self._kube.create(
                    SECRETS, _core.exec_secret_body(claim_name, uid, ns), ns
                )
            secret_uid = str(secret["metadata"]["uid"])
            # CC-002: the first token needs the Secret, not Bound, so it is requested while
            # the operator binds, and is there when the claim is.
            first_token = asyncio.ensure_future(self._token_for(claim_name, holder, secret_uid))
            first_token.add_done_callback(_retrieved)
            try:
                bound = await within(self._wait_bound(created, on_pending, progress), limit)
            except TIMEOUT_ERRORS:
                raise self._gave_up(claim_name, pools, limit, progress) from None
            if _name_of(pool_body) != bound.serving_pool:  # waited for it, or a fallback's
                pool_body = await self._read_pool((bound.serving_pool,), claim_name)
            held = AsyncClaim(
                self,
                bound,
                secret_uid=secret_uid,
                heartbeat=_core.heartbeat_interval(pool_body),
                on_lost=on_lost,
                on_host_not_ready=on_host_not_ready,
            )
            # The gRPC transport starts connecting to the claim's agent for the first exec
            # (CC-020) while the first token comes, before the caller gets the claim.
            self._connect(held.agent_address)
            held._token = await first_token
            held.start_holding()
            return held
        except BaseException:
            # CC-005: whoever stops the wait, the claim does not outlive it.
            if first_token is not None:
                first_token.cancel()
            if held is not None:
                self._claims.discard(held)
            await self._delete_shielded(claim_name, uid, secret_uid)
            raise

    async def _read_pool(self, pools: Sequence[str], claim: str | None) -> dict[str, Any] | None:
        """The first of `pools` that exists (read in order, stopping there), or None."""
        for pool in pools:
            with _mapped(f"reading Pool {pool}", claim), contextlib.suppress(NotFoundError):
                return await self._kube.get(POOLS, pool, self.namespace)
        return None

    def _gave_up(
        self, name: str, pools: Sequence[str], limit: float | None, progress: _BindProgress
    ) -> ClaimError:
        waited = f"after {limit:g}s" if limit is not None else ""
        p = progress.pending
        if p is not None and p.reason == ClaimReason.POOL_EXHAUSTED:
            return PoolExhaustedError(
                f"{_pools(pools)} stayed exhausted {waited}; deleted claim {name}", claim=name
            )
        if p is not None and p.reason == ClaimReason.POOL_NOT_FOUND:
            return PoolNotFoundError(f"{_missing(pools)}; deleted claim {name}", claim=name)
        why = f" ({p.reason}: {p.message})" if p is not None else ""
        return ClaimTimeoutError(
            f"claim {name} was not Bound {waited}{why}; deleted it", claim=name
        )

    async def _wait_bound(
        self,
        created: MicroVMClaim,
        on_pending: PendingCallback | None,
        progress: _BindProgress,
    ) -> MicroVMClaim:
        """Watch the claim from its create until Bound (CC-003); report pending reasons."""
        name, uid = created.metadata.name, created.metadata.uid
        # Each watch goes on from the newest version seen, a bookmark's included.
        cursor = WatchCursor(created.metadata.resource_version)
        outcome = await self._judge(name, created, uid, on_pending, progress)
        while outcome is None:
            with _mapped(f"watching claim {name}", name):
                try:
                    async for kind, obj in self._kube.watch(
                        CLAIMS,
                        self.namespace,
                        field_selector=name_selector(name),
                        resource_version=cursor.version,
                        timeout_seconds=WATCH_SECONDS,
                        on_bookmark=cursor.move,
                    ):
                        meta = obj.get("metadata") or {}
                        cursor.move(meta.get("resourceVersion"))
                        if kind == "DELETED":
                            if meta.get("uid") != uid:
                                continue  # an older claim of that name went away
                            current = None
                        else:
                            current = _core.parse_claim(obj)
                        outcome = await self._judge(name, current, uid, on_pending, progress)
                        if outcome is not None:
                            return outcome
                    continue  # the server ended this watch; go on from the last version
                except KubeError as e:
                    if e.status != 410:
                        raise
                # 410 Gone: our version is too old to watch from; read the claim, go on from it.
                try:
                    got = await self._kube.get(CLAIMS, name, self.namespace)
                except NotFoundError:
                    raise LeaseLostError(
                        f"claim {name} was deleted while waiting", claim=name
                    ) from None
                current = _core.parse_claim(got)
                cursor.move(current.metadata.resource_version)
                outcome = await self._judge(name, current, uid, on_pending, progress)
        return outcome

    async def _judge(
        self,
        name: str,
        claim: MicroVMClaim | None,
        uid: str,
        on_pending: PendingCallback | None,
        progress: _BindProgress,
    ) -> MicroVMClaim | None:
        if claim is not None and claim.metadata.uid != uid:
            return None  # an event of another claim of the same name; ours is what counts
        lost = _core.lost_reason(claim, uid)
        if lost is not None:
            raise LeaseLostError(f"claim {name} {lost} before it was Bound", claim=name)
        assert claim is not None
        if _core.is_bound(claim, datetime.now(UTC)):
            return claim
        if (failed := _core.failed(claim)) is not None:  # CC-117: it gave up waiting itself
            raise PoolExhaustedError(f"claim {name} failed: {failed}; deleted it", claim=name)
        p = _core.pending(claim)
        if p is not None and p != progress.pending:
            progress.pending = p
            if on_pending is not None:
                await _call(on_pending, p)
        if p is not None and p.reason == ClaimReason.POOL_NOT_FOUND and not progress.wait_for_pool:
            # CC-113: the Pool went away after the check before the create.
            raise PoolNotFoundError(
                f"{_missing(claim.spec.pool_names)}; deleted claim {name}", claim=name
            )
        return None

    async def attach(
        self,
        name: str,
        *,
        hold: bool = True,
        on_lost: LostCallback | None = None,
        on_host_not_ready: HostCallback | None = None,
    ) -> AsyncClaim:
        """A handle on the existing Bound claim `name` (e.g. made by another process).

        With `hold`, this handle renews it too. Raises `ClaimError` if the claim is not Bound
        and `LeaseLostError` if it is Expired or being deleted.
        """
        with _mapped(f"reading claim {name}", name):
            try:
                claim = _core.parse_claim(await self._kube.get(CLAIMS, name, self.namespace))
            except NotFoundError:
                raise ClaimError(f"claim {name} does not exist", claim=name) from None
            lost = _core.lost_reason(claim, claim.metadata.uid)
            if lost is not None:
                raise LeaseLostError(f"claim {name} {lost}", claim=name)
            if not _core.is_bound(claim, datetime.now(UTC)):
                why = f"is not Bound (phase {claim.status.phase or 'Pending'})"
                if claim.status.phase == ClaimPhase.BOUND:  # EA-013: not usable yet
                    why = "is Bound but its lease expiry is not recorded yet; try again"
                raise ClaimError(f"claim {name} {why}", claim=name)
            self._connect(claim.status.agent_address)  # while the rest is read
            secret_name = names.exec_secret_name(name)
            try:
                secret = await self._kube.get(SECRETS, secret_name, self.namespace)
            except NotFoundError:
                raise ClaimError(
                    f"claim {name} has no Secret {secret_name} to bind tokens to", claim=name
                ) from None
            owners = (secret.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("uid") == claim.metadata.uid for o in owners):
                raise ClaimError(f"Secret {secret_name} is not owned by claim {name}", claim=name)
            try:
                pool_body: dict[str, Any] | None = await self._kube.get(
                    POOLS, claim.serving_pool, self.namespace
                )
            except NotFoundError:
                pool_body = None
        held = AsyncClaim(
            self,
            claim,
            secret_uid=str(secret["metadata"]["uid"]),
            heartbeat=_core.heartbeat_interval(pool_body),
            on_lost=on_lost,
            on_host_not_ready=on_host_not_ready,
        )
        held.observe(claim)
        if hold:
            held.start_holding()
        return held

    async def claims(self) -> list[ClaimInfo]:
        """Every claim in the namespace, by name."""
        with _mapped(f"listing claims in {self.namespace}"):
            items = await self._kube.list(CLAIMS, self.namespace)
            infos = [_core.claim_info(_core.parse_claim(item)) for item in items]
        return sorted(infos, key=lambda i: i.name)

    async def release(self, name: str) -> bool:
        """Delete the claim `name` and its Secret; False if it was already gone (CC-021).

        The claim read here is the one deleted (uid precondition), and its Secret only if
        that claim owns it: a newer claim of the same name keeps its Secret and tokens.
        """
        with _mapped(f"deleting claim {name}", name):
            try:
                claim = await self._kube.get(CLAIMS, name, self.namespace)
            except NotFoundError:
                return False
            uid = str((claim.get("metadata") or {}).get("uid") or "")
            secret_uid = await self._owned_secret_uid(name, uid)
        await self._delete(name, uid, secret_uid)
        return True

    async def _owned_secret_uid(self, name: str, claim_uid: str) -> str | None:
        """The uid of Secret `<name>-exec` if the claim `claim_uid` owns it, else None."""
        try:
            secret = await self._kube.get(SECRETS, names.exec_secret_name(name), self.namespace)
        except NotFoundError:
            return None
        meta = secret.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        if not any(o.get("uid") == claim_uid for o in owners):
            return None
        return str(meta.get("uid") or "") or None

    # -- the IO a claim does through its client -----------------------------------------------

    async def _delete(self, name: str, uid: str, secret_uid: str | None) -> None:
        """Delete claim `uid` under `name` and its Secret `secret_uid`; gone or replaced
        already is fine. Both deletes carry a uid precondition, so a newer claim of the same
        name keeps its Secret, whose deletion would revoke its tokens (CC-021). Without
        `secret_uid` (never created) the Secret is left to the garbage collector. The two
        deletes go out together (one round trip, not two); the first failure is raised once
        both have ended."""

        async def delete(res: Resource, obj: str, obj_uid: str) -> None:
            with contextlib.suppress(NotFoundError, ConflictError):  # gone, or not ours
                await self._kube.delete(res, obj, self.namespace, uid=obj_uid)

        deletes = [delete(CLAIMS, name, uid)]
        if secret_uid:
            deletes.append(delete(SECRETS, names.exec_secret_name(name), secret_uid))
        with _mapped(f"deleting claim {name}", name):
            for outcome in await asyncio.gather(*deletes, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome

    async def _delete_shielded(self, name: str, uid: str, secret_uid: str | None) -> None:
        """`_delete`, finished even if the caller is cancelled meanwhile (`_Cleanups`)."""
        await self._cleanups.run(self._delete(name, uid, secret_uid), f"{self.namespace}/{name}")

    async def _delete_created(self, create: asyncio.Future[dict[str, Any]]) -> None:
        """Delete the claim `create` made, once its answer names it; a refused POST made none."""
        with contextlib.suppress(KubeError, MalformedObjectError):
            made = _core.parse_claim(await create).metadata
            await self._delete(made.name, made.uid, None)

    async def _renew(self, claim: AsyncClaim) -> MicroVMClaim | None:
        """One renewal (CC-010); the claim as it reads after it, None if it is gone."""
        now = datetime.now(UTC)
        with _mapped(f"renewing claim {claim.name}", claim.name):
            try:
                body = await self._kube.patch(
                    CLAIMS, claim.name, _core.renew_patch(claim.uid, now), self.namespace
                )
            except NotFoundError:
                return None
            except (ConflictError, InvalidError):
                # Conflict: the uid is not ours any more; Invalid: e.g. being deleted. Read
                # the claim and let observe() decide.
                try:
                    body = await self._kube.get(CLAIMS, claim.name, self.namespace)
                except NotFoundError:
                    return None
            return _core.parse_claim(body)

    async def _token(self, claim: AsyncClaim) -> _core.Token:
        """A new token for the claim's Holder, bound to its Secret (CC-002)."""
        return await self._token_for(claim.name, claim.holder, claim.secret_uid)

    async def _token_for(self, name: str, holder: str, secret_uid: str) -> _core.Token:
        secret = names.exec_secret_name(name)
        with _mapped(f"requesting a token for claim {name}", name):
            answer = await self._kube.create(
                SERVICEACCOUNTS,
                _core.token_request_body(secret, secret_uid, self.token_expiration),
                self.namespace,
                name=holder,
                subresource="token",
            )
            return _core.read_token(answer, datetime.now(UTC))

    async def _exec_transport(self) -> ExecTransport:
        if self._transport is None:
            await self._ca.get()
        transport = self._transport if self._transport is not None else self._grpc_transport()
        if transport is None:
            raise ConfigError("no Exec Agent CA configured: pass serving_ca to the client")
        return transport

    def _grpc_transport(self) -> GrpcExecTransport | None:
        """The client's own gRPC transport (None when it was given another, or no CA), made
        at its first use: gRPC is imported then, not with the client (`_exec`)."""
        if self._ca.known is None:
            return None
        if self._grpc is None:
            from batteryop.client._transport import GrpcExecTransport  # _GRPC_TRANSPORT

            self._grpc = GrpcExecTransport(self._ca.known, open_timeout=self.timeouts.exec_open)
        return self._grpc

    def _connect(self, address: str | None) -> None:
        """Have the client's own gRPC transport start connecting to a claim's agent (TLS
        handshake included) without waiting, so that the first exec finds the connection
        made; only if gRPC is imported already (or being imported: the `battery` command's
        `exec` and `run`), so a program that does not exec pays nothing for it. Best effort:
        whatever fails here fails again at the first exec, which reports it."""
        if not address or _GRPC_TRANSPORT not in sys.modules:
            return
        if self._ca.known is None and self._transport is None:  # CC-114: once it is known
            return self._ca.then(lambda: self._connect(address))
        with contextlib.suppress(Exception):
            transport = self._grpc_transport()
            if transport is not None:
                transport.connect(address)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark the outcome of a task nobody may await (a claim given up) as seen."""
    if not task.cancelled():
        task.exception()


def _pools(pools: Sequence[str]) -> str:
    """`Pool a`, or `Pools a, b` for a claim with fallback Pools (CC-116)."""
    return f"Pool {pools[0]}" if len(pools) == 1 else f"Pools {', '.join(pools)}"


def _missing(pools: Sequence[str]) -> str:
    return f"{_pools(pools)} {'does' if len(pools) == 1 else 'do'} not exist"


def _name_of(body: Mapping[str, Any] | None) -> str | None:
    return None if body is None else (body.get("metadata") or {}).get("name")


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("Could not delete a MicroVMClaim: %s", task.exception())


class _Cleanups:
    """Deletes of claims that finish even when their caller is cancelled (CC-005)."""

    def __init__(self, bound: float | None) -> None:
        self._bound = bound  # Timeouts.release
        self._running: set[asyncio.Future[None]] = set()

    async def run(self, cleanup: Awaitable[None], what: str) -> None:
        """Run `cleanup` (deleting MicroVMClaim `what`) within the bound, finished even if the
        caller is cancelled meanwhile (again and again); failures are logged (the error that
        stopped the caller is the one raised)."""
        task = asyncio.ensure_future(within(cleanup, self._bound))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_failure)
            raise
        except _GAVE_UP as e:
            log.warning("Could not delete MicroVMClaim %s: %s", what, e)

    async def wait(self) -> None:
        """Wait (within the bound) for the clean-ups whose callers stopped waiting."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=self._bound)


class AsyncClaim:
    """A Bound MicroVMClaim this process holds: identity, exec, renewal, and release.

    Use as `async with` (released on exit) or as a long-lived handle. While held, a background
    task renews it every `heartbeat_interval`; `lost` turns true when the lease is gone
    (`raise_if_lost()`), and `host_not_ready` holds the first HostReady=False report.
    """

    def __init__(
        self,
        client: AsyncClient,
        claim: MicroVMClaim,
        *,
        secret_uid: str,
        heartbeat: timedelta,
        on_lost: LostCallback | None = None,
        on_host_not_ready: HostCallback | None = None,
    ) -> None:
        self._client = client
        self._claim = claim
        self.secret_uid = secret_uid
        self._heartbeat = heartbeat
        self._on_lost = on_lost
        self._on_host_not_ready = on_host_not_ready
        self._lost: LeaseLostError | None = None
        self._lost_event = asyncio.Event()
        self._host_not_ready: HostNotReadyError | None = None
        self._token: _core.Token | None = None
        self._token_lock = asyncio.Lock()
        self._holder_task: asyncio.Task[None] | None = None
        self._released = False
        client._claims.add(self)

    def __repr__(self) -> str:
        return f"AsyncClaim({self.namespace}/{self.name}, microvm={self.microvm_uid})"

    # -- identity (CC-003) ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._claim.metadata.name

    @property
    def namespace(self) -> str:
        return self._claim.metadata.namespace

    @property
    def uid(self) -> str:
        return self._claim.metadata.uid

    @property
    def pool(self) -> str:
        return self._claim.serving_pool

    @property
    def holder(self) -> str:
        """The Holder ServiceAccount's name."""
        return self._claim.spec.service_account_name

    @property
    def microvm_uid(self) -> str:
        return self._claim.status.microvm_uid or ""

    @property
    def node_name(self) -> str:
        return self._claim.status.node_name or ""

    @property
    def agent_address(self) -> str | None:
        """`host:port` of the Exec Agent on the claim's Host, once the Host reported one."""
        return self._claim.status.agent_address

    @property
    def lease_expires_at(self) -> datetime | None:
        """battery's expiry of the lease, as last read."""
        return self._claim.status.lease_expires_at

    @property
    def info(self) -> ClaimInfo:
        return _core.claim_info(self._claim)

    @property
    def heartbeat_interval(self) -> timedelta:
        """How often the claim is renewed: its Pool's `spec.lease.heartbeatInterval`."""
        return self._heartbeat

    # -- the lease (CC-010..CC-013) --------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self._lost is not None

    @property
    def lost_error(self) -> LeaseLostError | None:
        return self._lost

    def raise_if_lost(self) -> None:
        if self._lost is not None:
            raise self._lost

    async def wait_lost(self) -> LeaseLostError:
        """Return once the lease is lost (CC-012)."""
        await self._lost_event.wait()
        assert self._lost is not None
        return self._lost

    @property
    def host_not_ready(self) -> HostNotReadyError | None:
        """The first HostReady=False report read while held (CC-013), else None."""
        return self._host_not_ready

    @property
    def holding(self) -> bool:
        return self._holder_task is not None and not self._holder_task.done()

    def start_holding(self) -> None:
        if self._holder_task is None and not self._released:
            self._holder_task = asyncio.get_running_loop().create_task(
                self._hold(), name=f"hold {self.namespace}/{self.name}"
            )

    async def _hold(self) -> None:
        interval = self.heartbeat_interval.total_seconds()
        while self._lost is None:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except LeaseLostError:
                return
            except ClientError as e:
                log.warning("Could not renew MicroVMClaim %s/%s: %s", self.namespace, self.name, e)
                continue  # retried at the next heartbeat
            except Exception:
                # Not an API answer (a bug, or a library's own error): the loop must not end
                # silently and let the lease lapse, so it says so and tries again (CC-010).
                log.exception("Could not renew MicroVMClaim %s/%s", self.namespace, self.name)
                continue
            if self._token is not None and self._token.due(datetime.now(UTC)):
                try:
                    await self.token()  # CC-011
                except ClientError as e:
                    log.warning("Could not refresh the token of %s: %s", self.name, e)
                except Exception:
                    log.exception("Could not refresh the token of %s", self.name)

    async def renew(self) -> None:
        """Renew now (the hold loop does this every heartbeat): set `spec.renewTime` (CC-010).

        Raises `LeaseLostError` when the answer shows the lease is gone.
        """
        self.raise_if_lost()
        self.observe(await self._client._renew(self))
        self.raise_if_lost()

    def observe(self, claim: MicroVMClaim | None) -> None:
        """Take in the claim as last read (None: not found): lost lease, first HostReady=False."""
        reason = _core.lost_reason(claim, self.uid)
        if reason is not None:
            self._mark_lost(reason)
            return
        assert claim is not None
        self._claim = claim
        report = _core.host_not_ready(claim)
        if report is not None and self._host_not_ready is None:
            why, detail = report
            self._host_not_ready = HostNotReadyError(
                f"Host {self.node_name} of claim {self.name} is not ready: {why}"
                + (f": {detail}" if detail else ""),
                reason=why,
                detail=detail,
                claim=self.name,
            )
            if self._on_host_not_ready is not None:
                self._on_host_not_ready(self._host_not_ready)

    def _mark_lost(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = LeaseLostError(f"claim {self.name} {reason}", claim=self.name)
        self._lost_event.set()
        if self._on_lost is not None:
            self._on_lost(self._lost)

    async def token(self) -> str:
        """The current bound token, requested again once two thirds of its life passed."""
        async with self._token_lock:
            if self._token is None or self._token.due(datetime.now(UTC)):
                self._token = await self._client._token(self)
            return self._token.value

    # -- exec (CC-020) ---------------------------------------------------------------------

    async def exec(  # CC-101: streamed, the exit code a result
        self,
        argv: list[str] | tuple[str, ...],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        timeout_seconds: int = 0,
    ) -> ExecResult:
        """Run `argv` in the MicroVM and collect its output; a non-zero exit is not an error."""
        out: list[bytes] = []
        err: list[bytes] = []
        result = await self.exec_stream(
            argv,
            stdin=None if stdin is None else bytes_source(stdin),
            stdout=out.append,
            stderr=err.append,
            env=env,
            cwd=cwd,
            user=user,
            timeout_seconds=timeout_seconds,
        )
        return ExecResult(result.exit_code, b"".join(out), b"".join(err), result.errors)

    async def put(self, path: str, source: Source, *, mode: int | None = None) -> None:
        """Copy bytes, a local file or folder (by path) or an open binary file to `path` in
        the MicroVM, streamed, over exec (CC-115); a file keeps its mode unless `mode` is set."""
        from batteryop.client import _files

        await _files.put(self, path, source, mode=mode)

    async def get(self, path: str, target: Target | None = None) -> bytes | None:
        """Copy the file or folder `path` out of the MicroVM to `target` (a local path, or an
        open binary file), streamed and put in place once whole; no target: the file's bytes."""
        from batteryop.client import _files

        return await _files.get(self, path, target)

    async def exec_stream(
        self,
        argv: list[str] | tuple[str, ...],
        *,
        stdin: AsyncIterable[bytes] | None = None,
        stdout: OutputSink,
        stderr: OutputSink,
        env: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        timeout_seconds: int = 0,
    ) -> ExecResult:
        """Run `argv`, streaming `stdin` up and output to `stdout`/`stderr` as it comes.

        The result holds the exit code and the agent's error messages (no output).
        """
        transport, address = await _route(self)
        request = ExecRequest(
            microvm_uid=self.microvm_uid,
            argv=tuple(argv),
            env=dict(env or {}),
            cwd=cwd,
            user=user,
            timeout_seconds=timeout_seconds,
            has_stdin=stdin is not None,
        )
        errors: list[str] = []
        try:
            code = await transport.run(
                address,
                await self.token(),
                request,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                errors=errors.append,
            )
        except ClientError as e:
            e.claim = self.name
            raise
        return ExecResult(code, errors=tuple(errors))

    async def proxy_ssh(self, upstream: AsyncIterable[bytes], downstream: OutputSink) -> None:
        """Relay `upstream` to the guest's sshd and its answers to `downstream` until the guest
        closes (EA-130, CC-118): what an ssh client's ProxyCommand does (`battery shell`)."""
        transport, address = await _route(self)
        if not isinstance(transport, SSHTransport):
            raise ConfigError("the client's exec transport cannot relay ssh (no proxy_ssh)")
        try:
            await transport.proxy_ssh(
                address, await self.token(), self.microvm_uid, upstream, downstream
            )
        except ClientError as e:
            e.claim = self.name
            raise

    # -- release (CC-021) ------------------------------------------------------------------

    async def detach(self) -> None:
        """Stop holding (renewing) without releasing; the lease ends when it expires."""
        task, self._holder_task = self._holder_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._client._claims.discard(self)

    async def release(self) -> None:
        """Delete the claim (uid precondition) and its Secret; idempotent, and it finishes
        even if the caller is cancelled meanwhile (CC-021)."""
        if self._released:
            return
        self._released = True
        await self.detach()
        await self._client._delete_shielded(self.name, self.uid, self.secret_uid)

    async def __aenter__(self) -> AsyncClaim:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


async def _route(claim: AsyncClaim) -> tuple[ExecTransport, str]:
    """The transport and the agent address a call into `claim`'s MicroVM takes; the claim is
    read again when its Host had published no agent address yet."""
    claim.raise_if_lost()
    transport = await claim._client._exec_transport()
    address = claim.agent_address
    if not address:
        # The Host may have reported its agent since the claim was read.
        with _mapped(f"reading claim {claim.name}", claim.name):
            try:
                body = await claim._client._kube.get(CLAIMS, claim.name, claim.namespace)
            except NotFoundError:
                body = None
        claim.observe(None if body is None else _core.parse_claim(body))
        claim.raise_if_lost()
        address = claim.agent_address
    if not address:
        raise NoAgentAddressError(
            f"claim {claim.name}: Host {claim.node_name} has published no Exec Agent address",
            claim=claim.name,
        )
    return transport, address
