import contextlib
import inspect
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from batteryop.api import names
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.obs.metrics import NAMESPACE, OperatorMetrics
from batteryop.operator.app import Operator
from batteryop.operator.config import parse
from batteryop.operator.pools.hosts import HostSet


def claim(name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "MicroVMClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": {"poolRef": {"name": "warm"}},
    }


def plural(handler: Any) -> object:
    """The resource a kopf handler was registered for (its selector's plural name)."""
    return handler.selector.plural or handler.selector.any_name


@contextlib.asynccontextmanager
async def offline_operator(metrics: OperatorMetrics | None = None) -> AsyncIterator[Operator]:
    """An Operator whose API server and battery are unreachable (nothing here calls them)."""
    kube_config = KubeConfig(server="http://127.0.0.1:9", ca_data=None)
    kube = KubeClient(kube_config)
    battery = BatteryClient.connect(
        BatteryConfig(target="127.0.0.1:9", call_timeout=timedelta(seconds=1))
    )
    try:
        yield Operator(
            parse([]), kube=kube, kube_config=kube_config, battery=battery, metrics=metrics
        )
    finally:
        await battery.aclose()
        await kube.aclose()


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}}


@pytest.mark.req("PO-010", "PO-011")
async def test_the_host_set_is_unknown_until_every_node_is_listed() -> None:
    async with offline_operator() as operator:
        published = {names.HOSTS_ANNOTATION: json.dumps(["host-a", "host-b"])}
        operator.on_battery_config({"metadata": {"annotations": published}})
        operator.on_node("ADDED", node("host-a", zone="a"))  # an event before the list ended
        # Not "host-a only": a Pool reconciled now keeps the Hosts battery already holds.
        assert operator.pool_deps.hosts is None
        operator.on_nodes_listed([node("host-a", zone="a"), node("host-b", zone="b")])
        assert operator.pool_deps.hosts == HostSet(
            {"host-a": {"zone": "a"}, "host-b": {"zone": "b"}}
        )
        # A later list (after a watch failure) drops a Node deleted meanwhile.
        operator.on_nodes_listed([node("host-a", zone="a")])
        assert operator.pool_deps.hosts == HostSet({"host-a": {"zone": "a"}})


async def test_kopf_runs_every_watch_handler_on_the_event_loop() -> None:
    # kopf runs a sync handler in its thread pool; the caches and work queues it feeds are
    # the event loop's alone (an asyncio.Event set from another thread may not wake it).
    async with offline_operator() as operator:
        handlers = list(operator.registry()._watching.get_all_handlers())
        assert {plural(h) for h in handlers} == {
            names.POOL_PLURAL,
            names.CLAIM_PLURAL,
        }
        for handler in handlers:
            assert inspect.iscoroutinefunction(handler.fn), handler.id
        claim_handler = next(h for h in handlers if plural(h) == names.CLAIM_PLURAL)
        handle: Any = claim_handler.fn  # kopf passes many more keywords; ours takes **_
        await handle(event={"type": "ADDED", "object": claim("c1")})
        assert operator.claims.queue.pending(("ns", "c1"))


async def test_claim_reconciles_share_one_lease_reader() -> None:
    async with offline_operator() as operator:  # CL-016: ListLeases shared per Pool
        assert operator._claim_deps(("ns", "a")).lease_reads is operator.lease_reads
        assert operator._claim_deps(("ns", "b")).lease_reads is operator.lease_reads


def with_phase(body: dict[str, object], phase: str, rv: str) -> dict[str, Any]:
    meta = dict(body["metadata"])  # type: ignore[call-overload]
    return {**body, "metadata": {**meta, "resourceVersion": rv}, "status": {"phase": phase}}


async def test_claims_are_counted_by_phase_as_their_phases_change() -> None:
    registry = CollectorRegistry()

    def count(phase: str) -> float | None:
        return registry.get_sample_value(f"{NAMESPACE}_claims_by_phase", {"phase": phase})

    async with offline_operator(OperatorMetrics(registry)) as operator:
        operator.on_claim("ADDED", with_phase(claim("a"), "Pending", "1"))
        operator.on_claim("ADDED", with_phase(claim("b"), "Pending", "2"))
        assert (count("Pending"), count("Bound")) == (2, 0)
        operator.on_claim("MODIFIED", with_phase(claim("a"), "Bound", "3"))
        operator.on_claim("MODIFIED", with_phase(claim("a"), "Bound", "4"))  # unchanged phase
        assert (count("Pending"), count("Bound")) == (1, 1)
        operator.on_claim("DELETED", with_phase(claim("a"), "Bound", "5"))
        operator.on_claim("DELETED", with_phase(claim("b"), "Pending", "6"))
        assert (count("Pending"), count("Bound")) == (0, 0)
