"""`Client` and `Claim`: the blocking API, with the same names and defaults as the async one
(CC-100).

Deviation from httpx's pattern (both halves written out plainly): here the sync classes run the
async ones on a private event loop in a daemon thread, and each method blocks on the result.
A held claim must keep renewing (CC-010) and refreshing its token (CC-011) while the caller's
thread does something else entirely, so a background thread is needed anyway; running the one
async implementation there keeps a single code path for binding, renewal, lost-lease and
release rules instead of two that could drift (agent-sandbox's sync and async clients did).

Callbacks (`on_pending`, `on_lost`, `on_host_not_ready`) run on that thread. A
`KeyboardInterrupt` while a call blocks cancels the async call and waits (up to
`Timeouts.release`) for its clean-up, so Ctrl-C during `claim()` still deletes the claim (CC-005).
`release()` and `close()` are not cancelled by it: they run to their end (within the same
bound) and the interrupt is raised after. Further interrupts during that wait are ignored, so a
second Ctrl-C cannot cut a claim's delete short (CC-108).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from batteryop.api._compat import TIMEOUT_ERRORS, within
from batteryop.client._async import (
    AsyncClaim,
    AsyncClient,
    HostCallback,
    LostCallback,
    PendingCallback,
)
from batteryop.client._exceptions import HostNotReadyError, LeaseLostError
from batteryop.client._exec import ExecTransport
from batteryop.client._models import (
    DEFAULT_TOKEN_EXPIRATION,
    ClaimInfo,
    ExecResult,
    Timeouts,
)
from batteryop.client._threads import start_daemon
from batteryop.kube.config import KubeConfig

if TYPE_CHECKING:
    from batteryop.client._files import Source, Target

T = TypeVar("T")


class _Portal:
    """An event loop on a daemon thread, and a blocking way to run coroutines on it."""

    def __init__(self, grace: float) -> None:
        self._grace = grace
        self.loop = asyncio.new_event_loop()
        self._thread = start_daemon(self.loop.run_forever, "battery-client")  # CC-108

    def call(self, coro: Coroutine[Any, Any, T], *, finish: bool = False) -> T:
        """Run `coro` on the loop and return its answer. On `KeyboardInterrupt`, cancel it
        (with `finish`: let it run on), wait for it to end, then raise the interrupt."""
        done = threading.Event()

        async def runner() -> T:
            try:
                return await coro
            finally:
                done.set()

        future: Future[T] = asyncio.run_coroutine_threadsafe(runner(), self.loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            if not finish:
                future.cancel()  # cancels the task; its clean-up (e.g. deleting a claim) runs
            self._wait_out(done)
            raise

    def _wait_out(self, done: threading.Event) -> None:
        """Wait up to the grace period for `done`; interrupts meanwhile do not end the wait."""
        deadline = time.monotonic() + self._grace
        while not done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(KeyboardInterrupt):
                done.wait(left)

    def close(self) -> None:
        """Stop the loop as `asyncio.run` does: what is still running there (gRPC's own call
        tasks, say) is cancelled and awaited first. A task left pending when the loop closes
        is reported on stderr ("Task was destroyed but it is pending!") once it is collected,
        which the `battery` command would print after the remote command's own stderr."""
        if self.loop.is_closed():
            return
        with contextlib.suppress(*TIMEOUT_ERRORS, asyncio.CancelledError):  # closing anyway
            asyncio.run_coroutine_threadsafe(self._drain(), self.loop).result(self._grace)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    async def _drain(self) -> None:
        current = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await self.loop.shutdown_asyncgens()


class Client:
    """Blocking twin of `AsyncClient` (same arguments); `close()` or use as `with`."""

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
        timeouts = timeouts or Timeouts()
        self._portal = _Portal(grace=timeouts.release)

        async def make() -> AsyncClient:
            return AsyncClient(
                namespace=namespace,
                kube_config=kube_config,
                kubeconfig=kubeconfig,
                context=context,
                serving_ca=serving_ca,
                token_expiration=token_expiration,
                timeouts=timeouts,
                exec_transport=exec_transport,
            )

        try:
            self._async = self._portal.call(make())
        except BaseException:
            self._portal.close()
            raise

    @property
    def namespace(self) -> str:
        return self._async.namespace

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop holding every claim (without releasing them) and stop the client's thread."""
        if not self._portal.loop.is_closed():
            try:
                self._portal.call(self._async.aclose(), finish=True)
            finally:
                self._portal.close()

    def claim(
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
    ) -> Claim:
        """See `AsyncClient.claim`."""
        held = self._portal.call(
            self._async.claim(
                pool,
                holder,
                name=name,
                generate_name=generate_name,
                labels=labels,
                on_pending=on_pending,
                on_lost=on_lost,
                on_host_not_ready=on_host_not_ready,
                timeout=timeout,
                wait_for_pool=wait_for_pool,
                fallback_pools=fallback_pools,
                wait_for_capacity=wait_for_capacity,
            )
        )
        return Claim(self._portal, held)

    def attach(
        self,
        name: str,
        *,
        hold: bool = True,
        on_lost: LostCallback | None = None,
        on_host_not_ready: HostCallback | None = None,
    ) -> Claim:
        """See `AsyncClient.attach`."""
        held = self._portal.call(
            self._async.attach(
                name, hold=hold, on_lost=on_lost, on_host_not_ready=on_host_not_ready
            )
        )
        return Claim(self._portal, held)

    def claims(self) -> list[ClaimInfo]:
        """See `AsyncClient.claims`."""
        return self._portal.call(self._async.claims())

    def release(self, name: str) -> bool:
        """See `AsyncClient.release`."""
        return self._portal.call(self._async.release(name), finish=True)


class Claim:
    """Blocking twin of `AsyncClaim`: the same properties and methods."""

    def __init__(self, portal: _Portal, claim: AsyncClaim) -> None:
        self._portal = portal
        self._async = claim

    def __repr__(self) -> str:
        return f"Claim({self.namespace}/{self.name}, microvm={self.microvm_uid})"

    @property
    def name(self) -> str:
        return self._async.name

    @property
    def namespace(self) -> str:
        return self._async.namespace

    @property
    def uid(self) -> str:
        return self._async.uid

    @property
    def pool(self) -> str:
        return self._async.pool

    @property
    def holder(self) -> str:
        return self._async.holder

    @property
    def microvm_uid(self) -> str:
        return self._async.microvm_uid

    @property
    def node_name(self) -> str:
        return self._async.node_name

    @property
    def agent_address(self) -> str | None:
        return self._async.agent_address

    @property
    def lease_expires_at(self) -> datetime | None:
        return self._async.lease_expires_at

    @property
    def heartbeat_interval(self) -> timedelta:
        return self._async.heartbeat_interval

    @property
    def info(self) -> ClaimInfo:
        return self._async.info

    @property
    def lost(self) -> bool:
        return self._async.lost

    @property
    def lost_error(self) -> LeaseLostError | None:
        return self._async.lost_error

    def raise_if_lost(self) -> None:
        self._async.raise_if_lost()

    def wait_lost(self, timeout: float | None = None) -> LeaseLostError | None:
        """Block until the lease is lost (None if `timeout` seconds pass first)."""

        async def wait() -> LeaseLostError | None:
            try:
                return await within(self._async.wait_lost(), timeout)
            except TIMEOUT_ERRORS:
                return None

        return self._portal.call(wait())

    @property
    def host_not_ready(self) -> HostNotReadyError | None:
        return self._async.host_not_ready

    @property
    def holding(self) -> bool:
        return self._async.holding

    def renew(self) -> None:
        self._portal.call(self._async.renew())

    def token(self) -> str:
        return self._portal.call(self._async.token())

    def exec(
        self,
        argv: list[str] | tuple[str, ...],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        timeout_seconds: int = 0,
    ) -> ExecResult:
        """See `AsyncClaim.exec`."""
        return self._portal.call(
            self._async.exec(
                argv, stdin=stdin, env=env, cwd=cwd, user=user, timeout_seconds=timeout_seconds
            )
        )

    def put(self, path: str, source: Source, *, mode: int | None = None) -> None:
        """See `AsyncClaim.put`."""
        self._portal.call(self._async.put(path, source, mode=mode))

    def get(self, path: str, target: Target | None = None) -> bytes | None:
        """See `AsyncClaim.get`."""
        return self._portal.call(self._async.get(path, target))

    def exec_stream(
        self,
        argv: list[str] | tuple[str, ...],
        *,
        stdin: Iterable[bytes] | None = None,
        stdout: Callable[[bytes], None],
        stderr: Callable[[bytes], None],
        env: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        timeout_seconds: int = 0,
    ) -> ExecResult:
        """See `AsyncClaim.exec_stream`; `stdin` is read on a thread of its own, so a blocking
        iterable (e.g. a terminal) is read off the event loop, one chunk at a time, and a read
        still waiting when the remote command exits holds up neither this call nor the
        process's exit (the thread is a daemon)."""
        source = None if stdin is None else _iterate_in_thread(stdin)
        return self._portal.call(
            self._async.exec_stream(
                argv,
                stdin=source,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=cwd,
                user=user,
                timeout_seconds=timeout_seconds,
            )
        )

    def proxy_ssh(self, upstream: Iterable[bytes], downstream: Callable[[bytes], None]) -> None:
        """See `AsyncClaim.proxy_ssh`; `upstream` is read on a thread of its own, as
        `exec_stream`'s stdin is."""
        self._portal.call(self._async.proxy_ssh(_iterate_in_thread(upstream), downstream))

    def detach(self) -> None:
        self._portal.call(self._async.detach(), finish=True)

    def release(self) -> None:
        """See `AsyncClaim.release`."""
        self._portal.call(self._async.release(), finish=True)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


async def _iterate_in_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """`chunks`, read one at a time on a daemon thread when the consumer asks for the next.

    Not `asyncio.to_thread`: the default executor's threads are joined at interpreter exit,
    so a read blocked on a terminal kept `battery exec -i` alive after the command ended.
    """
    loop = asyncio.get_running_loop()
    iterator = iter(chunks)
    wanted = threading.Semaphore(0)
    ready: asyncio.Queue[tuple[bytes | None, BaseException | None]] = asyncio.Queue()

    def put(item: tuple[bytes | None, BaseException | None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(ready.put_nowait, item)

    def read() -> None:
        while True:
            wanted.acquire()
            try:
                chunk = next(iterator, None)
            except BaseException as e:
                put((None, e))
                return
            put((chunk, None))
            if chunk is None:
                return

    start_daemon(read, "battery-client-stdin")
    while True:
        wanted.release()
        chunk, error = await ready.get()
        if error is not None:
            raise error
        if chunk is None:
            return
        yield chunk
