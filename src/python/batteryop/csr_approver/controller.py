"""`Approver`: follows the requests and the CAs, and runs a review of a request when one is due;
kopf drives it.

Inputs: the CertificateSigningRequests, all of them, listed and watched by kopf
(`kopf_driver`: it writes nothing to them; only the three signers' reach the approver, the
others are never touched: CT-102), kept as their newest copies in `inputs.Requests`; the three
CA Secrets (by name) and the CA bundle ConfigMap (by name, so an edit of it is put right), each
followed by `batteryop.kube.informer.list_watch`.

A request is reviewed in kopf's event handler (`on_request`), at once, one event at a time per
request. What that review could not finish is reviewed again by the approver's `WorkQueue`: at
once with the newest copy after a write conflict, with backoff after an error (kopf logs it with
its traceback, naming the request), and every open request when a CA is loaded. kopf's own
retries are not used: they wake a delayed handler by patching the object (`kopf_driver` says
why). A lock per request keeps the two from reviewing one request at once. kopf's watch runs
under an `obs.supervisor.Supervisor`, as the other watches and the queues' workers do (DP-107):
one that fails is logged with its traceback, named in `/readyz` while it is down, and started
again with backoff.

One review (`_handle_one`), from the newest copy of the request: done already (a certificate,
`Denied` or `Failed`), nothing (CT-003); else the chain of `review.steps` (read the Node, read
the pins, check, decide, sign: each step's module says what it owns and which requirements).

Serving requests are reviewed one at a time (`_serving_lock`), so two Nodes asking for the same
unpinned address are decided in order, the second denied, instead of both approved and the
second failed. Every write carries the resourceVersion it was decided on; a conflict re-reads
the request and reviews it again. Since every step starts from what the API server holds, a
restart at any point resumes where it stopped: an Approved request is signed after a restart,
a pin written just before a crash is the pin the request passes with.

CT-005: the CA certificates are published whenever a CA Secret or the bundle ConfigMap changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from batteryop.api._compat import within
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.csr_approver import kopf_driver
from batteryop.csr_approver.checks import SERVING_SIGNERS
from batteryop.csr_approver.config import ApproverConfig
from batteryop.csr_approver.inputs import Requests, finished
from batteryop.csr_approver.metrics import ApproverMetrics
from batteryop.csr_approver.publish import bundle, publish
from batteryop.csr_approver.request import Request
from batteryop.csr_approver.review.deps import ReviewDeps
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.csr_approver.review.steps import review_request
from batteryop.csr_approver.signing import CA, CAError
from batteryop.kube.client import KubeClient, Object, Objects
from batteryop.kube.errors import ConflictError, NotFoundError
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import (
    CERTIFICATE_SIGNING_REQUESTS,
    CONFIGMAPS,
    SECRETS,
    name_selector,
)
from batteryop.kube.workqueue import WorkQueue
from batteryop.obs.supervisor import Supervisor

log = logging.getLogger(__name__)

PUBLISH_KEY = "publish"

REQUESTS_WATCH_TASK = "watch-certificatesigningrequests"
"""kopf's list and watch of the requests (`kopf_driver`)."""
BUNDLE_WATCH_TASK = "watch-ca-bundle"
REQUESTS_QUEUE_TASK = "queue-certificatesigningrequests"
PUBLISH_QUEUE_TASK = "queue-ca-bundle"

KOPF_STOP_SECONDS = 10.0
"""How long kopf is given to stop by itself once the approver is asked to stop."""
RETRY_SECONDS = 1.0
"""When a review that raised in kopf's handler is tried again; the queue backs off after."""


def ca_watch_task(secret: str) -> str:
    """The name of the supervised watch of the CA Secret `secret`."""
    return f"watch-secret-{secret}"


class Approver:
    """Reviews, decides and signs the requests of the three signers; publishes the CAs."""

    def __init__(
        self,
        config: ApproverConfig,
        kube: KubeClient,
        *,
        metrics: ApproverMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self._kube = kube
        self._metrics = metrics
        self._clock = clock
        self._requests = Requests()
        self._cas: dict[str, CA | None] = {
            config.serving_ca_secret: None,
            config.client_ca_secret: None,
            config.exec_agent_serving_ca_secret: None,  # CT-101
        }
        self._kopf_ready = threading.Event()
        """Set by kopf, in its own thread (`kopf_driver.run`), once it has started."""
        self._stop = asyncio.Event()
        self._serving_lock = asyncio.Lock()
        self._workers = asyncio.Semaphore(config.workers)
        """`--workers`: requests reviewed at once, by kopf's handler and the queue together."""
        self._queue: WorkQueue[str] = WorkQueue(
            self._review_queued, name="certificatesigningrequests", workers=config.workers
        )
        self._publisher: WorkQueue[str] = WorkQueue(self._publish, name="ca-bundle", workers=1)
        self.supervisor = Supervisor()
        """Runs the watches and the queues' workers while `run` runs (DP-107); its `checks()`
        name each in `/readyz`."""
        for task in self._tasks():
            self.supervisor.add(task)
        self._deps = ReviewDeps(
            config=config,
            kube=kube,
            metrics=metrics,
            clock=clock,
            ca=self._cas.get,
            remember=self._requests.remember,
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """kopf has started (it lists the requests, then watches them) and the three CAs are
        loaded. kopf does not say when its first listing is complete."""
        return self._kopf_ready.is_set() and all(ca is not None for ca in self._cas.values())

    # -- running -----------------------------------------------------------------------------

    def _tasks(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """Every long-lived task, by the name the supervisor and `/readyz` give it."""
        return {
            REQUESTS_QUEUE_TASK: self._queue.run,
            PUBLISH_QUEUE_TASK: self._publisher.run,
            **{ca_watch_task(s): functools.partial(self._follow_ca, s) for s in self._cas},
            BUNDLE_WATCH_TASK: lambda: list_watch(
                self._kube,
                CONFIGMAPS,
                namespace=self.config.namespace,
                field_selector=name_selector(self.config.ca_bundle_config_map),
                on_list=lambda _items: self._publisher.add(PUBLISH_KEY),
                on_event=lambda _kind, _obj: self._publisher.add(PUBLISH_KEY),
            ),
            REQUESTS_WATCH_TASK: self._follow_requests,
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the inputs and work the queues, each under the supervisor, until `stop`."""
        self._stop = stop
        tasks = {
            name: self.supervisor.start(name, task)  # logged, restarted with backoff, in /readyz
            for name, task in self._tasks().items()
        }
        try:
            await stop.wait()
            # kopf sees `stop` too (`kopf_driver.run`) and winds down by itself first.
            with contextlib.suppress(TimeoutError):
                await within(asyncio.shield(tasks[REQUESTS_WATCH_TASK]), KOPF_STOP_SECONDS)
        finally:
            await self.supervisor.stop()

    async def _follow_requests(self) -> None:
        """kopf, in this process but on a loop and thread of its own, with a registry and
        settings of its own (`kopf_driver`); its handler reviews on this loop."""
        self._kopf_ready.clear()
        await kopf_driver.run(
            self._kube.config, self.on_request, stop=self._stop, ready=self._kopf_ready
        )
        # kopf returns without raising only once stopped by `stop`; should it end by itself,
        # the approver stops with it rather than run on without its requests.
        self._stop.set()

    # -- inputs ------------------------------------------------------------------------------

    async def _follow_ca(self, secret: str) -> None:
        def on_list(items: Objects) -> None:
            self._on_ca(secret, items[0] if items else None)

        def on_event(kind: str, obj: Object) -> None:
            self._on_ca(secret, None if kind == "DELETED" else obj)

        await list_watch(
            self._kube,
            SECRETS,
            namespace=self.config.namespace,
            field_selector=name_selector(secret),
            on_list=on_list,
            on_event=on_event,
        )

    async def on_request(self, kind: str | None, obj: Object) -> None:
        """kopf's handler: one event of a request of ours (`kind` None: listed), one at a time
        per request. Reviews it now if it is open and this is its newest copy."""
        name = str(obj["metadata"]["name"])
        if not self._requests.on_event(kind or "ADDED", obj):
            return
        async with self._requests.lock(name):
            try:
                again = await self._handle(name)
            except Exception:
                self._queue.add_after(name, RETRY_SECONDS)
                raise  # kopf logs it, naming the request
        if again is not None:
            self._queue.add_after(name, again)

    async def _review_queued(self, name: str) -> float | None:
        async with self._requests.lock(name):
            return await self._handle(name)

    def _on_ca(self, secret: str, obj: Object | None) -> None:
        ca: CA | None = None
        if obj is not None:
            try:
                ca = CA.from_secret(obj)
            except CAError as e:
                log.warning("Could not load CA", extra={"secret": secret, "error": e.problem})
        before = self._cas.get(secret)
        self._cas[secret] = ca
        if self._metrics:
            self._metrics.ca_loaded.labels(secret).set(1 if ca else 0)
        self._publisher.add(PUBLISH_KEY)
        if ca is not None and (before is None or before.cert != ca.cert):
            log.info(
                "Loaded CA", extra={"secret": secret, "subject": ca.cert.subject.rfc4514_string()}
            )
            for name in self._requests.open():
                self._queue.add(name)

    # -- the CA bundle (CT-005) --------------------------------------------------------------

    async def _publish(self, _key: str) -> None:
        serving = self._cas.get(self.config.serving_ca_secret)
        client = self._cas.get(self.config.client_ca_secret)
        exec_serving = self._cas.get(self.config.exec_agent_serving_ca_secret)
        data = bundle(  # CT-005, CT-105
            serving.cert_pem if serving else None,
            client.cert_pem if client else None,
            exec_serving.cert_pem if exec_serving else None,
        )
        if await publish(self._kube, self.config.namespace, self.config.ca_bundle_config_map, data):
            log.info(
                "Published CA certificates",
                extra={"configmap": self.config.ca_bundle_config_map, "keys": sorted(data)},
            )

    # -- one request -------------------------------------------------------------------------

    async def _handle(self, name: str) -> float | None:
        # `--workers` reviews at once; the time a review took starts once it has a worker.
        async with self._workers:
            return await self._handle_one(name)

    async def _handle_one(self, name: str) -> float | None:
        obj = self._requests.get(name)
        if obj is None:
            return None
        request = Request.from_object(obj)
        if finished(request):
            return None  # CT-003
        started = time.monotonic()
        try:
            if request.signer in SERVING_SIGNERS:
                async with self._serving_lock:
                    await self._review(name, request, obj)
            else:
                await self._review(name, request, obj)
        except ConflictError:
            # Someone else wrote first (the request, or the pins): review the newest copy.
            await self._refresh(name)
            return 0.0
        except NotFoundError:
            # The request gone is the end of it (kopf lists again after 410 Gone, but sends no
            # DELETED for what went meanwhile); anything else missing is an error to retry.
            if await self._refresh(name):
                raise
            return None
        finally:
            if self._metrics:
                self._metrics.review_seconds.observe(time.monotonic() - started)
        return None

    async def _review(self, name: str, request: Request, obj: Object) -> None:
        await review_request(ReviewScope(name=name, request=request, obj=obj, deps=self._deps))

    async def _refresh(self, name: str) -> bool:
        """Read the request again; False if it is gone."""
        try:
            fresh = await self._kube.get(CERTIFICATE_SIGNING_REQUESTS, name)
        except NotFoundError:
            self._requests.forget(name)
            return False
        self._requests.remember(fresh)
        return True
