"""How kopf runs the approver's watch of CertificateSigningRequests, writing nothing to them.

kopf lists and watches every CSR (it resumes from the last resourceVersion, lists again after
410 Gone, logs in with the approver's own credentials and again after a 401) and calls one
`@kopf.on.event` handler per event, one event at a time per request, with the newest body when
events arrived while the last one was handled. The approver decides in that handler
(`Approver.on_request`); kopf logs a handler that raises through its per-object logger, which
names the request.

The CSRs are not ours (CT-102: other signers' requests are never touched), so kopf must write
nothing to them, and does not:

- `@kopf.on.event` handlers take no finalizer, store no progress and no diff base. Timers and
  daemons would put kopf's finalizer on every request (kopf requires it for them and will not
  make it optional), and change handlers (`on.create`/`on.update`/`on.resume`) compare a diff
  base that leaves `status` out, where approvals live, and wake a delayed retry by patching a
  "touch" annotation onto the object. So retries are the approver's own work queue's, not
  kopf's (`controller`).
- Progress and diff-base storages are kept in memory (`MemoryProgressStorage`,
  `MemoryDiffBaseStorage`), so a handler added later cannot start writing annotations either.
- Event posting is off: the approver's decisions are conditions on the request and log lines.
  kopf's per-object log lines below warnings are off too (`kopf.objects`): it would log
  "Handler 'review' succeeded." for each of a request's three or so events, beside the
  approver's own line for each decision; a handler that raises is still logged by kopf.
- Peering is off (`standalone`: one replica; kopf would look for KopfPeering objects), and so is
  scanning (no watch of CRDs or Namespaces), so kopf needs no RBAC beyond the approver's own
  (`batteryop.manifests.csr_approver`): get, list and watch on CSRs.

kopf runs on an event loop of its own, in a thread of its own (`run`), as kopf's embedding
documentation asks: when `kopf.operator` ends it takes every task of its loop started after it
for one of its own, waits 5 s for them and cancels them. On the approver's loop that was every
task started while kopf ran (a supervised task started again, a server's handler, and, with the
approver in a test's process, the test's own tasks: the Exec Agent's certificate keepers were
cancelled when the approver stopped). The handler hands each event to the approver's loop,
which owns the approver's caches and queue, and waits for its review there. kopf in a thread
also leaves the process's SIGINT and SIGTERM handlers (`obs.process`) in place.

The CA Secrets and the CA bundle ConfigMap stay on `informer.list_watch` by name: kopf watches a
kind in a namespace with one field selector, so the two Secrets would need list and watch on
every Secret in the namespace, which the approver's RBAC rightly does not grant (CT-022).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import kopf

from batteryop.api import names
from batteryop.kube.client import Object
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS

HANDLER_ID = "review"
"""The handler's id in kopf's log lines (`Handler 'review' failed ...`)."""

OnRequest = Callable[[str | None, Object], Coroutine[Any, Any, None]]


class MemoryProgressStorage(kopf.ProgressStorage):
    """Handler progress kept in this process, by the object's uid; never written anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[str, dict[str, kopf.ProgressRecord]] = {}

    @staticmethod
    def _uid(body: kopf.Body) -> str:
        return str(body.get("metadata", {}).get("uid", ""))

    def fetch(self, *, key: str, body: kopf.Body) -> kopf.ProgressRecord | None:  # type: ignore[override]
        return self._records.get(self._uid(body), {}).get(key)

    def store(  # type: ignore[override]
        self, *, key: str, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch
    ) -> None:
        self._records.setdefault(self._uid(body), {})[key] = record

    def purge(self, *, key: str, body: kopf.Body, patch: kopf.Patch) -> None:  # type: ignore[override]
        self._records.get(self._uid(body), {}).pop(key, None)

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        """kopf's way to wake a delayed handler is a patch on the object: never made here."""

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return super().clear(essence=essence)


class MemoryDiffBaseStorage(kopf.DiffBaseStorage):
    """The last handled essence of each object, in this process; never written anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self._essences: dict[str, kopf.BodyEssence] = {}

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return self._essences.get(str(body.get("metadata", {}).get("uid", "")))

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        self._essences[str(body.get("metadata", {}).get("uid", ""))] = essence


def connection_info(config: KubeConfig) -> kopf.ConnectionInfo:
    """The approver's credentials for kopf, so its watch and our client are one identity. A
    token file is read now; kopf logs in again on a 401 and before `expiration`, so a rotated
    token is picked up."""
    token = config.bearer_token()
    return kopf.ConnectionInfo(
        server=config.server,
        ca_data=config.ca_data,
        insecure=config.insecure or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_data=config.cert_data,
        private_key_data=config.key_data,
        expiration=config.login_expiry(),
    )


def settings() -> kopf.OperatorSettings:
    """kopf's settings for the approver (module docstring: why each)."""
    s = kopf.OperatorSettings()
    s.peering.standalone = True
    s.scanning.disabled = True
    s.posting.enabled = False
    s.persistence.progress_storage = MemoryProgressStorage()
    s.persistence.diffbase_storage = MemoryDiffBaseStorage()
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    # The process ends itself (`obs.process`); kopf must never SIGKILL it after a stop.
    s.process.ultimate_exiting_timeout = None
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    return s


class _NoSignalsWarning(logging.Filter):
    """Drops kopf's warning that it sets no signal handlers outside the main thread: `run`
    puts it there on purpose, and the process's own handlers stop it (`obs.process`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("OS signals are ignored")


_KOPF_RUNNING_LOG = logging.getLogger("kopf._core.reactor.running")
if not any(isinstance(f, _NoSignalsWarning) for f in _KOPF_RUNNING_LOG.filters):
    _KOPF_RUNNING_LOG.addFilter(_NoSignalsWarning())


def _ours(spec: Mapping[str, Any], **_: Any) -> bool:
    return spec.get("signerName") in names.SIGNERS  # CT-102: the others are never handled


def registry(kube_config: KubeConfig, on_request: OnRequest) -> kopf.OperatorRegistry:
    """A registry of its own (never kopf's global one): the login, and one event handler."""
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)  # type: ignore[arg-type]
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(kube_config)

    # A coroutine: kopf would run a plain function in its thread pool, and the approver's
    # caches and queue belong to the event loop.
    @kopf.on.event(
        CERTIFICATE_SIGNING_REQUESTS.group,
        CERTIFICATE_SIGNING_REQUESTS.version,
        CERTIFICATE_SIGNING_REQUESTS.plural,
        id=HANDLER_ID,
        when=_ours,
        registry=reg,
    )
    async def review(event: Mapping[str, Any], **_: Any) -> None:
        await on_request(event.get("type"), event.get("object") or {})

    return reg


async def run(
    kube_config: KubeConfig,
    on_request: OnRequest,
    *,
    stop: asyncio.Event,
    ready: threading.Event,
) -> None:
    """kopf until `stop` is set, on an event loop and in a thread of its own (module
    docstring: why); `on_request` runs on the caller's loop. `ready` is set once kopf has
    started. Returns once kopf has ended; raises what kopf raised if it failed."""
    home = asyncio.get_running_loop()
    loop = asyncio.new_event_loop()
    stopping = asyncio.Event()  # kopf's stop flag: waited for, and set, on kopf's loop only
    ended: asyncio.Future[None] = home.create_future()

    async def on_request_at_home(kind: str | None, obj: Object) -> None:
        # kopf cancelling its handler (as it stops) cancels the review too.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(on_request(kind, obj), home))

    async def operator() -> None:
        await kopf.operator(
            registry=registry(kube_config, on_request_at_home),
            settings=settings(),
            clusterwide=True,  # CSRs are cluster-scoped; no namespace is watched by kopf
            standalone=True,
            stop_flag=stopping,
            ready_flag=ready,
        )

    def settle(error: BaseException | None) -> None:
        if ended.done():
            return
        if error is None:
            ended.set_result(None)
        else:
            ended.set_exception(error)

    def thread() -> None:
        error: BaseException | None = None
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(operator())
        except Exception as e:
            error = e
        except BaseException as e:  # not raised as is into the caller's task
            error = RuntimeError(f"kopf ended with {e!r}")
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            home.call_soon_threadsafe(settle, error)

    threading.Thread(target=thread, name="kopf", daemon=True).start()
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([ended, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        with contextlib.suppress(RuntimeError):  # kopf's loop is closed: kopf has ended
            loop.call_soon_threadsafe(stopping.set)
    await ended
