"""How soon a Pool that sizes itself answers a burst (PO-107), through the whole stack of
`claim_bind_bench` (the real kube-apiserver, the operator, the fake battery and two fake
flintlockd Hosts, each its own process).

Each run makes a Pool with `spec.autoscaling` (minIdle 1, maxSize BURST + 1, window 60s),
waits for its one warm MicroVM, then creates BURST claims on it back to back. Measured from
the first create:

- `sized`: the Pool's `status.size` reaches BURST (the claim rate: battery took the new size);
- `first_new`: the first claim Bound after that, from the capacity the policy added (before
  it, claims take the warm MicroVM and, ImmediateOnLease, the one battery makes to replace
  each leased one; in a run where those served the whole burst there is none, and `n` says
  in how many runs there was);
- `all`: every claim of the burst is Bound.

Prints one JSON object:

    {"bench": "autoscale", "burst": ..., "sized": {"n": ..., "p50_ms": ..., "p99_ms": ...},
     "first_new": {...}, "all": {...}}

BATTERYOP_BENCH=1 runs RUNS=10 bursts; otherwise 2 (a smoke run).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from bench.claim_bind_bench import (
    BoundWatcher,
    create,
    make_pool,
    run_on_stack,
    wait_pool_available,
)
from bench.stats import FULL, latency_figures
from kubernetes import client as k8s
from kubernetes import watch

from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane, admin_client

RUNS = 10 if FULL else 2
BURST = 20


POLICY = {"minIdle": 1, "maxSize": BURST + 1, "window": "60s"}


def wait_sized(custom: k8s.CustomObjectsApi, namespace: str, name: str, size: int) -> float:
    """The monotonic time the Pool `name` is first seen with `status.size` >= `size` (a watch
    from now; the first event is the Pool as it is)."""
    stream = watch.Watch()
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        names.GROUP,
        names.VERSION,
        namespace,
        names.POOL_PLURAL,
        field_selector=f"metadata.name={name}",
        timeout_seconds=120,
    ):
        if ((event["object"].get("status") or {}).get("size") or 0) >= size:
            stream.stop()
            return time.monotonic()
    raise AssertionError(f"Pool {name} never reached size {size}")


def run_bench(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    watcher = BoundWatcher(api, namespace)
    sized: list[float] = []
    first_new: list[float] = []
    every: list[float] = []
    try:
        for run in range(RUNS):
            pool = f"auto-{run}"
            make_pool(custom, namespace, pool, None, autoscaling=POLICY)
            wait_pool_available(custom, namespace, 1, name=pool)
            claims = [f"burst-{run}-{i}" for i in range(BURST)]
            started: list[float] = []

            def burst(
                pool: str = pool, claims: list[str] = claims, started: list[float] = started
            ) -> None:
                for claim in claims:
                    started.append(create(custom, namespace, claim, pool))

            creating = threading.Thread(target=burst)
            creating.start()
            at_size = wait_sized(custom, namespace, pool, BURST)
            creating.join()
            watcher.wait(claims, 120)
            bound = sorted(watcher.bound[c] for c in claims)
            t0 = started[0]
            sized.append(at_size - t0)
            after = [b for b in bound if b >= at_size]
            if after:  # else battery's replacements served the whole burst first
                first_new.append(after[0] - t0)
            every.append(bound[-1] - t0)
    finally:
        watcher.stop()
        api.close()
    return {
        "bench": "autoscale",
        "burst": BURST,
        "sized": latency_figures(sized),
        "first_new": latency_figures(first_new),
        "all": latency_figures(every),
    }


async def test_a_burst_on_a_pool_that_sizes_itself(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    result = await run_on_stack(controlplane, tmp_path, run_bench, "bench-autoscale")
    assert result["sized"]["n"] == result["all"]["n"] == RUNS
