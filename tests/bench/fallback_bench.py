"""What a fallback costs, and how soon a waiting claim takes a MicroVM made for it (CL-106,
CL-109), through the whole stack of `claim_bind_bench` (the real kube-apiserver, the operator,
the fake battery and two fake flintlockd Hosts, each its own process).

- `direct` and `fallback`: create-to-Bound of N claims made one at a time, alternating a claim
  on the warm Pool with one whose first Pool has no MicroVM and whose fallback is the warm Pool
  (so both see the same machine's noise). The difference is the first Pool's ClaimVM, answered
  RESOURCE_EXHAUSTED, in the same reconcile.
- `woken`: a claim on an empty Pool waits WAIT_S seconds (its backoff is then WAIT_S seconds
  too, `pending`); the Pool is resized to one MicroVM; the figure is the time from the resize
  to Bound: the fake battery's provisioning, its VM_AVAILABLE Event, and the claim it wakes.
  Without the wake the claim would bind at its next backoff retry, up to WAIT_S later.

Prints one JSON object:

    {"bench": "fallback", "direct": {"n": ..., "p50_ms": ..., "p99_ms": ...},
     "fallback": {...}, "woken": {"n": ..., "wait_s": ..., "p50_ms": ..., "p99_ms": ...}}

BATTERYOP_BENCH=1 runs N=100 pairs and 10 wakes; otherwise N=10 and 2 wakes (a smoke run).
"""

from __future__ import annotations

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

from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane, admin_client

N = 100 if FULL else 10
WAKES = 10 if FULL else 2
WAIT_S = 8.0
"""How long a woken claim has waited before its Pool gets a MicroVM."""


def run_bench(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    make_pool(custom, namespace, "warm", 2 * N + 5)
    make_pool(custom, namespace, "empty", 0)
    for i in range(WAKES):
        make_pool(custom, namespace, f"later-{i}", 0)
    wait_pool_available(custom, namespace, 2 * N + 5)
    watcher = BoundWatcher(api, namespace)
    try:
        direct: list[float] = []
        fallback: list[float] = []
        for i in range(N):
            for name, pools, into in (
                (f"direct-{i}", ("warm",), direct),
                (f"fallback-{i}", ("empty", "warm"), fallback),
            ):
                sent = create(custom, namespace, name, *pools)
                watcher.wait([name], 60)
                into.append(watcher.bound[name] - sent)
        woken: list[float] = []
        for i in range(WAKES):
            pool, name = f"later-{i}", f"waits-{i}"
            create(custom, namespace, name, pool)
            time.sleep(WAIT_S)  # the wait being measured against, not a synchronisation
            assert name not in watcher.bound
            resized = time.monotonic()
            custom.patch_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                names.POOL_PLURAL,
                pool,
                {"spec": {"size": 1}},
            )
            watcher.wait([name], 60)
            woken.append(watcher.bound[name] - resized)
    finally:
        watcher.stop()
        api.close()
    return {
        "bench": "fallback",
        "direct": latency_figures(direct),
        "fallback": latency_figures(fallback),
        "woken": {"wait_s": WAIT_S, **latency_figures(woken)},
    }


async def test_fallback_claims_and_woken_claims(controlplane: ControlPlane, tmp_path: Path) -> None:
    result = await run_on_stack(controlplane, tmp_path, run_bench, "bench-fallback")
    assert (result["direct"]["n"], result["fallback"]["n"]) == (N, N)
    assert result["woken"]["n"] == WAKES
