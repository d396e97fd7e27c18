"""Liveness, readiness and metrics over HTTP (aiohttp), for every deployable.

`HealthServer` serves, on the health-probe address (``--health-probe-bind-address``):

- ``/healthz``: liveness, from the liveness checks (none: always ``ok``);
- ``/readyz``: readiness, from the readiness checks (DP-012: the operator passes one that
  fails while battery is unavailable);
- ``/healthz/<name>``, ``/readyz/<name>``: one check alone;
- ``/metrics``: the Prometheus exposition of `metrics_registry`, when one is given.

Answers follow the Kubernetes API server's style: 200 ``ok`` when every check passes;
otherwise 503 with one line per check, ``[+]kube ok`` or ``[-]battery failed[: error]``,
then ``readyz check failed``. ``?verbose`` lists every check on success too. A check is a
plain or async callable returning a bool; one that raises, or outlasts `check_timeout`,
fails with its error in the body. Checks run concurrently.

`MetricsServer` serves ``/metrics`` alone, for a separate ``--metrics-bind-address`` port
(DP-102).
Neither server uses `prometheus_client`'s global registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from batteryop.obs.addresses import parse_bind_address

log = logging.getLogger(__name__)

Check = Callable[[], bool | Awaitable[bool]]
"""A health check: true when healthy. May be sync (must be cheap) or async."""

DEFAULT_CHECK_TIMEOUT = 5.0
"""Seconds a single check may take before it counts as failing."""

_SHUTDOWN_TIMEOUT = 2.0


class ServerNotStartedError(RuntimeError):
    """A server's bound address was asked for before `start()` (or after `stop()`)."""

    def __init__(self, server: str) -> None:
        super().__init__(f"{server} is not started")
        self.server = server


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    error: str | None = None

    def line(self) -> str:
        if self.ok:
            return f"[+]{self.name} ok"
        return f"[-]{self.name} failed" + (f": {self.error}" if self.error else "")


async def run_check(name: str, check: Check, timeout: float) -> CheckResult:
    """Run one check; an exception or a timeout is a failure carrying its description."""
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            outcome = check()
            if inspect.isawaitable(outcome):
                outcome = await outcome
    except TimeoutError as exc:
        if deadline.expired():
            return CheckResult(name, False, f"timed out after {timeout:g}s")
        return CheckResult(name, False, _one_line(f"{type(exc).__name__}: {exc}"))
    except Exception as exc:
        log.warning("health check raised", exc_info=True, extra={"check": name})
        return CheckResult(name, False, _one_line(f"{type(exc).__name__}: {exc}"))
    return CheckResult(name, bool(outcome))


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Server:
    """One aiohttp site: start, stop, bound address."""

    _kind = "server"

    def __init__(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None) -> None:
        self.host = host
        self.port = port
        self._ssl_context = ssl_context
        self._app = web.Application()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError(f"{self._kind} already started")
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            # "" (":8081") means every interface, which aiohttp spells None.
            site = web.TCPSite(runner, self.host or None, self.port, ssl_context=self._ssl_context)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("%s listening", self._kind, extra={"address": self.host, "port": self.bound_port})

    async def stop(self) -> None:
        """Stop listening and close connections; a no-op when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def bound_port(self) -> int:
        """The port actually bound (useful with port 0). With host ``""`` and port 0 each
        address family may get its own port; this is the first."""
        if self._runner is None or not self._runner.addresses:
            raise ServerNotStartedError(self._kind)
        return int(self._runner.addresses[0][1])

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler answering the Prometheus (or negotiated OpenMetrics) exposition."""

    async def handle(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    return handle


class HealthServer(_Server):
    """``/healthz``, ``/readyz`` and (with `metrics_registry`) ``/metrics`` on one port."""

    _kind = "health server"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        checks: Mapping[str, Check] | None = None,
        liveness_checks: Mapping[str, Check] | None = None,
        metrics_registry: CollectorRegistry | None = None,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(host, port, ssl_context=ssl_context)
        self._readiness: dict[str, Check] = dict(checks or {})
        self._liveness: dict[str, Check] = dict(liveness_checks or {})
        self._check_timeout = check_timeout
        self._app.router.add_get("/healthz", self._probe_handler("healthz", self._liveness))
        self._app.router.add_get("/readyz", self._probe_handler("readyz", self._readiness))
        self._app.router.add_get("/healthz/{name}", self._one_check_handler(self._liveness))
        self._app.router.add_get("/readyz/{name}", self._one_check_handler(self._readiness))
        if metrics_registry is not None:
            self._app.router.add_get("/metrics", metrics_handler(metrics_registry))

    def add_readiness_check(self, name: str, check: Check) -> None:
        """Add (or replace) a readiness check; allowed while serving."""
        self._readiness[name] = check

    def add_liveness_check(self, name: str, check: Check) -> None:
        """Add (or replace) a liveness check; allowed while serving."""
        self._liveness[name] = check

    async def readiness(self) -> list[CheckResult]:
        """Run every readiness check now (what ``/readyz`` answers)."""
        return await self._run(self._readiness)

    async def liveness(self) -> list[CheckResult]:
        """Run every liveness check now (what ``/healthz`` answers)."""
        return await self._run(self._liveness)

    async def _run(self, checks: Mapping[str, Check]) -> list[CheckResult]:
        items = sorted(checks.items())
        return list(await asyncio.gather(*(run_check(n, c, self._check_timeout) for n, c in items)))

    def _probe_handler(
        self, probe: str, checks: Mapping[str, Check]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            results = await self._run(checks)
            failed = [r for r in results if not r.ok]
            if not failed and "verbose" not in request.query:
                return web.Response(text="ok")
            lines = [r.line() for r in results]
            if failed:
                log.debug("%s check failed", probe, extra={"checks": [r.name for r in failed]})
                lines.append(f"{probe} check failed")
                return web.Response(status=503, text="\n".join(lines) + "\n")
            lines.append(f"{probe} check passed")
            return web.Response(text="\n".join(lines) + "\n")

        return handle

    def _one_check_handler(
        self, checks: Mapping[str, Check]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            check = checks.get(name)
            if check is None:
                raise web.HTTPNotFound(text=f"no check named {name!r}\n")
            result = await run_check(name, check, self._check_timeout)
            if result.ok:
                return web.Response(text="ok")
            return web.Response(status=503, text=result.line() + "\n")

        return handle


class MetricsServer(_Server):
    """``/metrics`` alone, for a metrics address separate from the health probes."""

    _kind = "metrics server"

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(host, port, ssl_context=ssl_context)
        self._app.router.add_get("/metrics", metrics_handler(registry))


@contextlib.asynccontextmanager
async def serving_probes(
    *,
    health_bind_address: str,
    metrics_bind_address: str,
    checks: Mapping[str, Callable[[], bool]],
    registry: CollectorRegistry,
) -> AsyncIterator[None]:
    """`/healthz` and `/readyz` (`checks`) on `--health-probe-bind-address`, `/metrics` of
    `registry` on `--metrics-bind-address`, each left out when its address is `0`; running for
    the block. Shared by the deployables whose probes and metrics listen apart."""
    servers: list[HealthServer | MetricsServer] = []
    health_at = parse_bind_address(health_bind_address, flag="--health-probe-bind-address")
    if health_at is not None:
        servers.append(
            HealthServer(*health_at, checks=dict(checks), liveness_checks={"loop": lambda: True})
        )
    metrics_at = parse_bind_address(metrics_bind_address, flag="--metrics-bind-address")
    if metrics_at is not None:
        servers.append(MetricsServer(*metrics_at, registry))
    try:
        for server in servers:
            await server.start()
        yield
    finally:
        for server in servers:
            await server.stop()
