import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from batteryop.obs.exported.operator import NAMESPACE
from batteryop.obs.health import HealthServer, MetricsServer, ServerNotStartedError
from batteryop.obs.metrics import BatteryCallMetrics, OperatorMetrics

WAIT = 5.0  # seconds: the bound on every request


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:
        yield session


async def _get(
    http: aiohttp.ClientSession, server: HealthServer | MetricsServer, path: str
) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{server.bound_port}{path}") as response:
        return response.status, await response.text()


def _ok() -> bool:
    return True


async def _async_ok() -> bool:
    await asyncio.sleep(0)
    return True


async def test_readyz_answers_ok_when_every_check_passes_and_verbose_lists_them(
    http: aiohttp.ClientSession,
) -> None:
    async with HealthServer("127.0.0.1", 0, checks={"kube": _ok, "battery": _async_ok}) as s:
        assert await _get(http, s, "/readyz") == (200, "ok")
        status, body = await _get(http, s, "/readyz?verbose")
    assert status == 200
    assert body.splitlines() == ["[+]battery ok", "[+]kube ok", "readyz check passed"]


@pytest.mark.req("DP-012")
async def test_readyz_fails_with_503_listing_each_check_while_battery_is_unavailable(
    http: aiohttp.ClientSession,
) -> None:
    battery_available = False

    async def battery() -> bool:
        await asyncio.sleep(0)
        return battery_available

    async with HealthServer("127.0.0.1", 0, checks={"battery": battery, "kube": _ok}) as s:
        status, body = await _get(http, s, "/readyz")
        assert status == 503
        assert body.splitlines() == ["[-]battery failed", "[+]kube ok", "readyz check failed"]

        battery_available = True
        assert await _get(http, s, "/readyz") == (200, "ok")


async def test_a_check_that_raises_fails_with_its_error(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    async def battery() -> bool:
        raise ConnectionError("battery at 127.0.0.1:50051\nrefused")

    caplog.set_level(logging.WARNING, logger="batteryop.obs.health")
    async with HealthServer("127.0.0.1", 0, checks={"battery": battery, "kube": _ok}) as s:
        status, body = await _get(http, s, "/readyz")
    assert status == 503
    assert "[-]battery failed: ConnectionError: battery at 127.0.0.1:50051 refused" in body
    assert "[+]kube ok" in body
    assert any(getattr(r, "check", None) == "battery" and r.exc_info for r in caplog.records)


async def test_a_check_that_hangs_fails_after_the_check_timeout(
    http: aiohttp.ClientSession,
) -> None:
    never = asyncio.Event()

    async def stuck() -> bool:
        await never.wait()
        return True

    async with HealthServer("127.0.0.1", 0, checks={"stuck": stuck}, check_timeout=0.05) as s:
        status, body = await _get(http, s, "/readyz")
    assert status == 503
    assert "[-]stuck failed: timed out after 0.05s" in body


async def test_checks_run_concurrently(http: aiohttp.ClientSession) -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a() -> bool:  # each passes only once the other has started
        a_started.set()
        await b_started.wait()
        return True

    async def b() -> bool:
        b_started.set()
        await a_started.wait()
        return True

    async with HealthServer("127.0.0.1", 0, checks={"a": a, "b": b}, check_timeout=2.0) as s:
        assert await _get(http, s, "/readyz") == (200, "ok")


async def test_healthz_uses_the_liveness_checks_only(http: aiohttp.ClientSession) -> None:
    alive = True

    def loop_alive() -> bool:
        return alive

    def never_ready() -> bool:
        return False

    async with HealthServer(
        "127.0.0.1", 0, checks={"battery": never_ready}, liveness_checks={"loop": loop_alive}
    ) as s:
        assert await _get(http, s, "/healthz") == (200, "ok")
        assert (await _get(http, s, "/readyz"))[0] == 503
        alive = False
        status, body = await _get(http, s, "/healthz")
    assert status == 503
    assert body.splitlines() == ["[-]loop failed", "healthz check failed"]


async def test_no_checks_means_healthy_and_ready(http: aiohttp.ClientSession) -> None:
    async with HealthServer("127.0.0.1", 0) as s:
        assert await _get(http, s, "/healthz") == (200, "ok")
        assert await _get(http, s, "/readyz") == (200, "ok")
        assert await _get(http, s, "/readyz?verbose") == (200, "readyz check passed\n")


async def test_single_check_endpoints_and_checks_added_while_serving(
    http: aiohttp.ClientSession,
) -> None:
    def down() -> bool:
        return False

    async with HealthServer("127.0.0.1", 0, checks={"kube": _ok}) as s:
        assert await _get(http, s, "/readyz/kube") == (200, "ok")
        assert (await _get(http, s, "/readyz/battery"))[0] == 404
        s.add_readiness_check("battery", down)
        assert await _get(http, s, "/readyz/battery") == (503, "[-]battery failed\n")
        assert (await _get(http, s, "/readyz"))[0] == 503
        s.add_liveness_check("loop", down)
        assert (await _get(http, s, "/healthz/loop"))[0] == 503


async def test_metrics_on_the_health_port_expose_observations(
    http: aiohttp.ClientSession,
) -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    BatteryCallMetrics(metrics).on_call("ClaimVM", "UNAVAILABLE", 0.25)
    metrics.set_battery_subscribed(True)

    async with HealthServer("127.0.0.1", 0, metrics_registry=registry) as s:
        url = f"http://127.0.0.1:{s.bound_port}/metrics"
        async with http.get(url) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = await response.text()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    labels = (("code", "UNAVAILABLE"), ("rpc", "ClaimVM"))
    assert samples[(f"{NAMESPACE}_battery_call_errors_total", labels)] == 1.0
    assert samples[(f"{NAMESPACE}_battery_call_seconds_count", labels)] == 1.0
    assert samples[(f"{NAMESPACE}_battery_subscribed", ())] == 1.0


async def test_metrics_can_be_served_on_their_own_port(http: aiohttp.ClientSession) -> None:
    registry = CollectorRegistry()
    OperatorMetrics(registry).set_workqueue_depth("claims", 3)
    async with (
        HealthServer("127.0.0.1", 0) as health,
        MetricsServer("127.0.0.1", 0, registry) as metrics_server,
    ):
        assert health.bound_port != metrics_server.bound_port
        assert (await _get(http, health, "/metrics"))[0] == 404
        status, text = await _get(http, metrics_server, "/metrics")
        assert (await _get(http, metrics_server, "/readyz"))[0] == 404
    assert status == 200
    assert f'{NAMESPACE}_workqueue_depth{{controller="claims"}} 3.0' in text


async def test_openmetrics_is_negotiated_by_accept_header(http: aiohttp.ClientSession) -> None:
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    async with MetricsServer("127.0.0.1", 0, registry) as s:
        url = f"http://127.0.0.1:{s.bound_port}/metrics"
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with http.get(url, headers=headers) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            assert (await response.text()).endswith("# EOF\n")


async def test_lifecycle_bound_port_and_stop(http: aiohttp.ClientSession) -> None:
    server = HealthServer("127.0.0.1", 0)
    with pytest.raises(ServerNotStartedError):
        _ = server.bound_port
    await server.start()
    port = server.bound_port
    assert port > 0
    with pytest.raises(RuntimeError, match="already started"):
        await server.start()
    await server.stop()
    await server.stop()  # idempotent
    with pytest.raises(ServerNotStartedError):
        _ = server.bound_port
    with pytest.raises(aiohttp.ClientConnectionError):
        await http.get(f"http://127.0.0.1:{port}/healthz")
