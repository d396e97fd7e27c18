import inspect
from datetime import timedelta
from typing import Any

from batteryop.api import names
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.operator.app import Operator
from batteryop.operator.config import parse


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


async def test_kopf_runs_every_watch_handler_on_the_event_loop() -> None:
    # kopf runs a sync handler in its thread pool; the caches and work queues it feeds are
    # the event loop's alone (an asyncio.Event set from another thread may not wake it).
    kube_config = KubeConfig(server="http://127.0.0.1:9", ca_data=None)
    kube = KubeClient(kube_config)
    battery = BatteryClient.connect(
        BatteryConfig(target="127.0.0.1:9", call_timeout=timedelta(seconds=1))
    )
    operator = Operator(parse([]), kube=kube, kube_config=kube_config, battery=battery)
    try:
        handlers = list(operator.registry()._watching.get_all_handlers())
        assert {plural(h) for h in handlers} == {
            names.POOL_PLURAL,
            names.CLAIM_PLURAL,
            "nodes",
        }
        for handler in handlers:
            assert inspect.iscoroutinefunction(handler.fn), handler.id
        claim_handler = next(h for h in handlers if plural(h) == names.CLAIM_PLURAL)
        handle: Any = claim_handler.fn  # kopf passes many more keywords; ours takes **_
        await handle(event={"type": "ADDED", "object": claim("c1")})
        assert operator.claims.queue.pending(("ns", "c1"))
    finally:
        await battery.aclose()
        await kube.aclose()
