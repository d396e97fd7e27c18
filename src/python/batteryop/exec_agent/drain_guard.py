"""The drain guard: while claims are Bound on this Host, a drain of its Node waits (EA-040, EA-041).

A drain (`kubectl drain`, Cluster API deleting a Machine, an autoscaler) evicts the Node's Pods
through the Eviction API, which refuses to evict a Pod while its PodDisruptionBudget allows no
disruption, and keeps trying. The guard is such a pair, in the agent's own namespace
(`--guard-namespace`), both named `names.drain_guard_name(node)` (EA-041):

- a PodDisruptionBudget with `minAvailable: 1` selecting `names.DRAIN_GUARD_LABEL=<node>`,
  created first, so the Pod is never without it;
- a Pod with that label, bound to this Node by `spec.nodeName` (no scheduler: it lands on a
  cordoned Node too), tolerating every taint, running `--guard-image` (pause), with no
  ServiceAccount token and no volumes, owned by the Node as its controller (the garbage
  collector removes it with the Node) and deleted at once when it goes
  (`terminationGracePeriodSeconds: 0`: pause has nothing to finish). Nothing else: non-root,
  `RuntimeDefault` seccomp, no escalation, no capabilities, a read-only root filesystem, the
  requests and limits of `api.drain_guard`. The admission policy of EA-051 admits exactly this
  Pod (EA-110), so a field added here must be one the policy allows.

While at least one MicroVMClaim, in any namespace, is `Bound` with `status.host.nodeName` naming
this Node, the agent keeps the pair; when none is left it deletes the Pod, then the budget, and
the drain goes on (EA-040). Not at once while the Node is schedulable, though: the pair then
stays `--drain-guard-linger` (a minute by default) after the last claim went, so that a Host
serving claim after claim (a CI fleet's) does not create and delete a Pod, which the kubelet
starts and stops, and a budget for every claim, beside that claim's own requests (EA-042). No
drain is held by it: a drain starts with a cordon, and on a cordoned Node the pair goes as
soon as no claim is Bound. (A drain that evicts without cordoning, or a cluster autoscaler
deciding which Node to remove, meets the guard for at most the linger.) A claim bound during
the linger finds the guard in place.

The Eviction API ignores budgets for a Pod that is still Pending: the guard holds a drain once
the kubelet runs it, which it does within seconds of a claim binding (the pause image is
usually on the Node already: containerd runs every Pod sandbox from it).

The drain timeout: when the Node becomes unschedulable (the cordon every drain starts with), the
agent records the time on the Node, once, in the annotation `names.DRAIN_STARTED_ANNOTATION`
(RFC 3339 with Go's nanosecond form), so a restarted agent keeps counting from it. Once
`--drain-timeout` has passed since then, the agent removes the guard whatever is still Bound and
logs every such claim as abandoned (their MicroVMs go with the Host); it does not put the guard
back while the Node stays cordoned. Uncordoning removes the annotation, and a Bound claim brings
the guard back.

What the agent knows comes from two watches (`kube.informer.list_watch`): every claim, and its
own Node, by name. Until the claims have been listed, and again from a failed list or watch
until the next list succeeds, the guard is left as it is, held or not: it is never removed, or
made, on a guess. Only the drain timeout ends it then, with a log that the claims are unknown.

Restarts and repeats: at start the agent reads the guard Pod and adopts it if it is there; a
create answered AlreadyExists and a delete answered NotFound are what was wanted. A write that
fails is tried again with backoff (1 s, doubling to 30 s) or at the next event, whichever comes
first. The agent may only get, create and delete the Pod and create and delete the budget (the
Role in the Manifests): it does not watch them, so a guard Pod someone else deletes comes back
only after the agent restarts.

The pair's shape and its writes on the API server are `guard_pair.GuardPair`; this module
decides when to hold and release.

Time comes from a `batteryop.api.clock.Clock`, so tests move it past the timeout instead of
waiting an hour.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from batteryop.api import names
from batteryop.api.backoff import Backoff
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.conditions import ClaimPhase
from batteryop.api.times import format_duration, format_rfc3339_nano, parse_time
from batteryop.exec_agent.guard_pair import GuardBusyError, GuardPair
from batteryop.kube.client import KubeClient, Objects
from batteryop.kube.errors import KubeError
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CLAIMS, NODES, name_selector
from batteryop.obs.supervisor import Supervisor
from batteryop.obs.tasks import cancel_all

log = logging.getLogger(__name__)

RETRY: Final = (1.0, 30.0)
"""A failed pass is tried again after 1 s, doubling to 30 s (or at the next event)."""

CLAIMS_WATCH_TASK: Final = "drain-guard-claims"
NODE_WATCH_TASK: Final = "drain-guard-node"
TASKS: Final = (CLAIMS_WATCH_TASK, NODE_WATCH_TASK)
"""The guard's two watches, run under `DrainGuard.watches` while `run` runs (DP-107)."""

Object = dict[str, Any]


def bound_on(body: Mapping[str, Any], node: str) -> bool:
    """Whether the claim `body` is Bound on `node` (EA-040)."""
    status = body.get("status") or {}
    host = status.get("host") or {}
    return status.get("phase") == ClaimPhase.BOUND and host.get("nodeName") == node


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class DrainGuard:
    """Keeps the guard of `node` while claims are Bound there (see the module docstring).

    guard = DrainGuard(kube, node_name=..., namespace=..., image=..., timeout=...)
    await guard.run(stop)
    health_checks = guard.watches.checks()   # one per watch, down while it is (DP-107)
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        node_name: str,
        namespace: str,
        image: str = names.DRAIN_GUARD_IMAGE,
        timeout: timedelta = timedelta(seconds=names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS),
        linger: timedelta = timedelta(seconds=names.EXEC_AGENT_DRAIN_GUARD_LINGER_SECONDS),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._kube = kube
        self.node_name = node_name
        self.namespace = namespace
        self.name = names.drain_guard_name(node_name)
        self._pair = GuardPair(kube, node_name=node_name, namespace=namespace, image=image)
        self._timeout = timeout
        self._linger = linger
        self._clock = clock
        self._bound: dict[str, str] = {}
        """uid -> namespace/name of every claim Bound on this Node."""
        self.claims_known = False
        """Whether the claims have been listed since the last failure."""
        self.claim_failures = 0
        self._node: Object | None = None
        self.held: bool | None = None
        """Whether the guard is in place; None until the agent has looked."""
        self.idle_since: datetime | None = None
        """Since when the guard has been held with no claim Bound here (EA-042), if it is."""
        self.drain_started: datetime | None = None
        """When the current drain started (the Node's annotation), while it is cordoned."""
        self._cleared: str | None = None
        """The drain start last removed from the Node."""
        self.reconciles = 0
        self.failures = 0
        """Passes that failed (each is tried again; see the module docstring)."""
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self.watches = Supervisor()
        """Runs the two watches (`TASKS`) while `run` runs."""
        for task in TASKS:
            self.watches.add(task)

    @property
    def bound_claims(self) -> list[str]:
        """`namespace/name` of every claim Bound on this Node, as last seen."""
        return sorted(self._bound.values())

    # -- what the watches say ---------------------------------------------------------------

    def _claims_listed(self, items: Objects) -> None:
        self._bound = {
            str(o["metadata"]["uid"]): _key(o) for o in items if bound_on(o, self.node_name)
        }
        self.claims_known = True
        self._wake.set()

    def _claim_event(self, kind: str, obj: Object) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if kind != "DELETED" and bound_on(obj, self.node_name):
            self._bound[uid] = _key(obj)
        else:
            self._bound.pop(uid, None)
        self._wake.set()

    def _claims_failed(self, error: Exception) -> None:
        # What we hold may be stale until the next list: leave the guard as it is (EA-040).
        self.claims_known = False
        self.claim_failures += 1
        self._wake.set()

    def _node_listed(self, items: Objects) -> None:
        self._node = items[0] if items else None
        self._wake.set()

    def _node_event(self, kind: str, obj: Object) -> None:
        self._node = None if kind == "DELETED" else obj
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the claims and the Node and keep the guard right until `stop` is set."""
        self.watches.start(
            CLAIMS_WATCH_TASK,
            lambda: list_watch(
                self._kube,
                CLAIMS,
                on_list=self._claims_listed,
                on_event=self._claim_event,
                on_error=self._claims_failed,
            ),
        )
        self.watches.start(
            NODE_WATCH_TASK,
            lambda: list_watch(
                self._kube,
                NODES,
                field_selector=name_selector(self.node_name),
                on_list=self._node_listed,
                on_event=self._node_event,
            ),
        )
        backoff = Backoff(*RETRY)
        try:
            while not stop.is_set():
                self._wake.clear()
                retry: float | None = None
                deadline: datetime | None = None
                try:
                    deadline = await self.reconcile()
                    backoff.reset()
                except Exception as e:  # an API error or a bug: log, and try again
                    retry = backoff.next()
                    log.warning(
                        "Could not bring the drain guard up to date; trying again",
                        # An API error is expected now and then; anything else is a bug.
                        exc_info=not isinstance(e, KubeError | GuardBusyError),
                        extra={"node": self.node_name, "error": str(e), "retry_in": retry},
                    )
                await self._wait(stop, deadline, retry)
        finally:
            await self.watches.stop()

    async def _wait(
        self, stop: asyncio.Event, deadline: datetime | None, retry: float | None
    ) -> None:
        """Until something changed, `stop`, the time to look again or the retry time."""
        waits: list[Awaitable[Any]] = [stop.wait(), self._wake.wait()]
        if deadline is not None:
            waits.append(self._clock.sleep_until(deadline))
        if retry is not None:
            waits.append(asyncio.sleep(retry))
        tasks = [asyncio.ensure_future(w) for w in waits]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_all(tasks)

    async def wait_for(self, predicate: Callable[[DrainGuard], bool]) -> None:
        """Return once `predicate(self)` holds after a pass (for tests and probes)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def reconcile(self) -> datetime | None:
        """One pass; returns when to look again (the drain deadline, or the end of the guard's
        linger; None: on events only)."""
        try:
            return await self._reconcile()
        except Exception:
            self.failures += 1
            raise
        finally:
            self.reconciles += 1
            async with self._changed:
                self._changed.notify_all()

    async def _reconcile(self) -> datetime | None:
        node = self._node
        if node is None:
            return None  # not seen yet, or gone: nothing can own a guard
        now = self._clock.now()
        await self._track_drain(node, now)
        if self.held is None:
            self.held = await self._read_guard(adopting=True)
        deadline = self.drain_started + self._timeout if self.drain_started else None
        if deadline is not None and now >= deadline:
            if self.held:  # EA-040: the timeout ends the hold, whatever is Bound
                self._log_abandoned()
                await self._remove("the drain timeout passed")
            return None
        if not self.claims_known:
            return deadline  # EA-040: never act on a stale or missing list of claims
        if self._bound or not self.held:
            self.idle_since = None
            if self._bound and not self.held:
                await self._create(node)
            return deadline
        if self.drain_started is not None or self._linger <= timedelta(0):
            await self._remove("no claim is Bound on the Host")  # EA-040
            return None
        # EA-042: no claim, no drain; the guard stays a while for the next claim.
        if self.idle_since is None:
            self.idle_since = now
        until = self.idle_since + self._linger
        if now < until:
            return until
        await self._remove(
            f"no claim has been Bound on the Host for {format_duration(self._linger)}"
        )
        return None

    async def _track_drain(self, node: Object, now: datetime) -> None:
        """Record when a cordon started the drain; forget it once the Node is uncordoned."""
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        recorded = annotations.get(names.DRAIN_STARTED_ANNOTATION)
        if not cordoned:
            self.drain_started = None
            if recorded is not None:
                # A quick cordon again may be seen before this removal is: that value is old.
                self._cleared = str(recorded)
                await self._annotate(None)
                log.info(
                    "Cleared the drain start: the Node is schedulable again",
                    extra={"node": self.node_name},
                )
            return
        if recorded is not None and str(recorded) == self._cleared:
            recorded = None  # the last drain's start, removed: this is a new drain
        if recorded is not None:
            try:
                self.drain_started = parse_time(str(recorded))
                return
            except ValueError:
                log.warning(
                    "Replaced an unreadable drain start",
                    extra={"node": self.node_name, "value": recorded},
                )
                self.drain_started = None
        if self.drain_started is None:  # else: we wrote it, and its event has not come yet
            await self._annotate(format_rfc3339_nano(now))
            self.drain_started = now
            log.info(
                "Recorded the drain start: the Node was cordoned",
                extra={"node": self.node_name, "drain_started": format_rfc3339_nano(now)},
            )

    async def _annotate(self, value: str | None) -> None:
        patch = {"metadata": {"annotations": {names.DRAIN_STARTED_ANNOTATION: value}}}
        await self._kube.patch(NODES, self.node_name, patch)

    async def _read_guard(self, *, adopting: bool = False) -> bool:
        """Whether the guard Pod is there and not being deleted."""
        present = await self._pair.present()
        if present and adopting:
            log.info(
                "Adopted the drain guard",
                extra={"node": self.node_name, "pod": f"{self.namespace}/{self.name}"},
            )
        return present

    async def _create(self, node: Object) -> None:
        await self._pair.create(node)
        self.held = True
        log.info(
            "Holding drains of the Node: claims are Bound on it",
            extra={"node": self.node_name, "claims": len(self._bound)},
        )

    async def _remove(self, why: str) -> None:
        await self._pair.delete()
        self.held = False
        self.idle_since = None
        log.info("Released the drain guard: " + why, extra={"node": self.node_name})

    def _log_abandoned(self) -> None:
        started = format_rfc3339_nano(self.drain_started) if self.drain_started else ""
        if not self.claims_known:
            log.warning(
                "Drain timeout passed; the claims Bound on the Host could not be listed",
                extra={"node": self.node_name, "drain_started": started},
            )
            return
        for claim in self.bound_claims:
            log.warning(
                "Abandoned MicroVMClaim %s: the drain timeout passed",
                claim,
                extra={"node": self.node_name, "claim": claim, "drain_started": started},
            )
