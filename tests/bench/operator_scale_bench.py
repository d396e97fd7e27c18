"""The operator at scale: many claims over many Hosts, and churn (issue 8, items 1 and 7).

Two measurements, each on its own stack (the real kube-apiserver, the operator as its own
process acting as its ServiceAccount, the fake battery as its own process). `HOSTS` simulated
Hosts, each a Node labelled as a Host and published in the Host set; the fake battery reaches
them all through `FLINTLOCKDS` fake flintlockd processes (one flintlockd serves many Hosts
here; each Host still gets its own channel in battery). Claims spread over `POOLS` Pools.

- `test_claims_at_scale`: one-at-a-time binds (`SEQUENTIAL` claims) on an empty cluster; then
  `CLAIMS` claims created (16 client threads), bound and settled (expiry recorded), the
  operator's RSS and cache sizes printed at 1,000 (when reached) and at `CLAIMS`; once
  battery has topped every Pool up again, one-at-a-time binds again with them all present
  (p50/p99 against the empty cluster's); then the operator is killed and started
  again, and the time until every claim is reconciled again (its claim reconciles counted on
  /metrics reach the number of claims and its queue is empty) is printed.
- `test_churn`: `CLAIMS` claims created, bound and deleted in waves of `WAVE`, the operator's
  RSS and every cache's size (`battery_operator_cache_entries`) before and after; entries of
  deleted objects must be gone. The operator runs through `bench.memory`, which also prints
  what its memory is made of before and after (CPython's arenas, glibc's heap, what
  `malloc_trim` gives back; with BATTERYOP_BENCH_TRACEMALLOC=1 the source lines that grew).

Sizes are parameters: BATTERYOP_SCALE_CLAIMS (default 10,000 with BATTERYOP_BENCH=1, else 20
as a smoke pass) and BATTERYOP_SCALE_HOSTS (default 100 from 1,000 claims, else 4). The full run takes many minutes and the machine is shared: figures from it
say so next to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import memory
from bench.claim_bind_bench import (
    PRODUCTION_LOGGING,
    BoundWatcher,
    create,
    operator_timings,
    wait_pool_available,
)
from bench.profiles import recording
from bench.stats import FULL, latency_figures
from bench.workload import apiserver_metrics, apiserver_request_means
from kubernetes import client as k8s

from batteryop.api import names, samples
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.fake_battery.process import FakeBatteryProcess
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.localstack import operator_kubeconfig, prepare_cluster
from batteryop.testing.operator_runner import OperatorProcess

CLAIMS = int(os.environ.get("BATTERYOP_SCALE_CLAIMS") or (10_000 if FULL else 20))
HOSTS = int(os.environ.get("BATTERYOP_SCALE_HOSTS") or (100 if CLAIMS >= 1000 else 4))
POOLS = 10 if HOSTS >= 100 else 2
FLINTLOCKDS = ("127.0.0.31", "127.0.0.32")
SEQUENTIAL = 50 if FULL or CLAIMS >= 200 else 3
WAVE = 100 if CLAIMS >= 1000 else 10


def progress(result: dict[str, Any]) -> None:
    """The figures so far, on one line (a long run that is stopped still leaves them)."""
    print(f"\nprogress {json.dumps(result)}", flush=True)


def host_names() -> dict[str, str]:
    return {f"host-{i:03d}": FLINTLOCKDS[i % len(FLINTLOCKDS)] for i in range(HOSTS)}


def cache_sizes(metrics: str) -> dict[str, float]:
    """battery_operator_cache_entries by map, from the operator's /metrics."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("battery_operator_cache_entries{"):
            labels, value = line[len("battery_operator_cache_entries{") :].rsplit("} ", 1)
            out[labels.split('map="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def metric_sum(metrics: str, name: str, label: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(name + "{") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def pool_names() -> list[str]:
    return [f"scale-{i}" for i in range(POOLS)]


def pool_sizes(each: int, first_extra: int = SEQUENTIAL) -> dict[str, int]:
    """Each Pool's size: `each`, and the first (where one-at-a-time binds go) `first_extra`
    more."""
    return {name: each + (first_extra if i == 0 else 0) for i, name in enumerate(pool_names())}


def make_pools(
    custom: k8s.CustomObjectsApi, namespace: str, each: int, timeout: float, first_extra: int = 0
) -> None:
    """`POOLS` Pools of `each` MicroVMs; the first (where one-at-a-time binds go) holds
    `first_extra` more. Each Pool is made once the one before has its MicroVMs available:
    battery starts a Pool's whole shortfall at once (one provision per missing MicroVM) and
    retries a failed one on its next pass with no backoff, so 10 Pools of 1,000 made together
    kept the fake battery and two fake flintlockd processes too busy to answer within their
    deadlines (a run on 2026-12-01 had not provisioned them after 25 minutes)."""
    deadline = time.monotonic() + timeout
    for name, size in pool_sizes(each, first_extra).items():
        pool = samples.demo_pool(name=name, namespace=namespace)
        pool["spec"]["size"] = size
        pool["spec"].pop("hooks", None)  # a hook runs a process per MicroVM in flintlockd
        # Nobody renews here: Leases must outlive the run, or the claims would be Expired.
        pool["spec"]["lease"] = {"expiryThreshold": "2h"}
        custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, pool
        )
        wait_pool_available(custom, namespace, size, name=name, deadline=deadline)


def wait_replenished(
    custom: k8s.CustomObjectsApi, namespace: str, sizes: dict[str, int], timeout: float
) -> None:
    """Until every Pool is back at its size: a Pool tops itself up as it is claimed
    (IMMEDIATE_ON_LEASE, the default), so right after 10,000 binds battery and the fake
    flintlockd processes are still provisioning 10,000 replacements. A one-at-a-time
    measurement "with 10,000 claims present" made then measured that provisioning too (a run
    on 2026-12-02 did: battery's GetPool took 37 ms instead of 6.5)."""
    deadline = time.monotonic() + timeout
    for name, size in sizes.items():
        wait_pool_available(custom, namespace, size, name=name, deadline=deadline)


def create_many(
    custom: k8s.CustomObjectsApi, namespace: str, claim_names: list[str]
) -> dict[str, float]:
    pools = pool_names()

    def one(i_name: tuple[int, str]) -> tuple[str, float]:
        i, name = i_name
        return name, create(custom, namespace, name, pools[i % len(pools)])

    with ThreadPoolExecutor(max_workers=16) as pool_exec:
        return dict(pool_exec.map(one, enumerate(claim_names)))


def sequential_binds(
    custom: k8s.CustomObjectsApi,
    watcher: BoundWatcher,
    namespace: str,
    prefix: str,
    operator: OperatorProcess,
    battery: FakeBatteryProcess,
) -> dict[str, Any]:
    """`SEQUENTIAL` claims one at a time, each created once the one before is Bound: create to
    Bound p50/p99, and where the time went: the create call as the client saw it, the API
    server's own mean time per claim create and status write, and the operator's mean
    reconcile and battery call times over the same claims; with BATTERYOP_BENCH_PYSPY, the
    operator's and battery's top frames meanwhile (`profiles`)."""
    latencies, create_calls = [], []
    made = []
    api = custom.api_client
    apiserver_before, operator_before = apiserver_metrics(api), operator.metrics_text()
    with recording({"operator": operator.popen.pid, "battery": battery.pid}, prefix):
        for i in range(SEQUENTIAL):
            name = f"{prefix}-{i}"
            sent = create(custom, namespace, name, pool_names()[0])
            create_calls.append(time.monotonic() - sent)
            watcher.wait([name], 60)
            latencies.append(watcher.bound[name] - sent)
            made.append(name)
    apiserver_after, operator_after = apiserver_metrics(api), operator.metrics_text()
    delete_and_wait(custom, namespace, made)
    return {
        **latency_figures(latencies),
        "create_call": latency_figures(create_calls),
        "apiserver": apiserver_request_means(
            apiserver_before,
            apiserver_after,
            [f"POST {names.CLAIM_PLURAL}", f"PATCH {names.CLAIM_PLURAL}/status"],
        ),
        "operator": operator_timings(operator_before, operator_after),
    }


def delete_and_wait(custom: k8s.CustomObjectsApi, namespace: str, claim_names: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool_exec:
        list(
            pool_exec.map(
                lambda n: custom.delete_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, n
                ),
                claim_names,
            )
        )
    gone = set(claim_names)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        listed: Any = custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
        )
        if not gone & {item["metadata"]["name"] for item in listed["items"]}:
            return
        time.sleep(0.5)
    raise AssertionError("deleted claims were never released")


@contextlib.asynccontextmanager
async def stack(
    controlplane: ControlPlane,
    tmp_path: Path,
    command: tuple[list[str], dict[str, str]] | None = None,
) -> Any:
    hosts = host_names()
    prepare_cluster(controlplane, hosts)
    kubeconfig = operator_kubeconfig(controlplane, tmp_path / "operator.kubeconfig")
    async with contextlib.AsyncExitStack() as exit_stack:
        flintlocks = {
            address: await exit_stack.enter_async_context(FakeFlintlockd.start(address=address))
            for address in FLINTLOCKDS
        }
        battery = await exit_stack.enter_async_context(
            FakeBatteryProcess.start(
                hosts={name: flintlocks[address].target for name, address in hosts.items()}
            )
        )
        operator = await exit_stack.enter_async_context(
            OperatorProcess.start(
                kubeconfig=kubeconfig,
                battery_target=battery.target,
                extra_args=PRODUCTION_LOGGING,
                command=command,
            )
        )
        yield kubeconfig, battery, operator, exit_stack


async def test_claims_at_scale(controlplane: ControlPlane, tmp_path: Path) -> None:
    namespace = "bench-scale"
    each = CLAIMS // POOLS + 5
    api = admin_client(controlplane)
    custom = k8s.CustomObjectsApi(api)
    result: dict[str, Any] = {"bench": "operator_scale", "claims": CLAIMS, "hosts": HOSTS}
    async with stack(controlplane, tmp_path) as (kubeconfig, battery, operator, exit_stack):
        k8s.CoreV1Api(api).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        )
        provisioning = time.monotonic()
        await asyncio.to_thread(make_pools, custom, namespace, each, 1800, SEQUENTIAL)
        result["pools_available_s"] = round(time.monotonic() - provisioning, 1)
        progress(result)
        watcher = BoundWatcher(api, namespace)
        try:
            pid = operator.popen.pid
            result["rss_mb_empty"] = memory.rss_mb(pid)
            result["sequential_empty"] = await asyncio.to_thread(
                sequential_binds, custom, watcher, namespace, "seq-empty", operator, battery
            )
            claim_names = [f"c-{i}" for i in range(CLAIMS)]
            started = time.monotonic()
            first = claim_names[: min(1000, CLAIMS)]
            await asyncio.to_thread(create_many, custom, namespace, first)
            # Settled: every claim bound and its expiry recorded (CL-016), queue quiet.
            await asyncio.to_thread(watcher.wait, first, 1800, expiry=True)
            if CLAIMS >= 1000:
                result["rss_mb_at_1000"] = memory.rss_mb(pid)
                result["caches_at_1000"] = cache_sizes(operator.metrics_text())
            progress(result)
            rest = claim_names[len(first) :]
            if rest:
                await asyncio.to_thread(create_many, custom, namespace, rest)
                await asyncio.to_thread(watcher.wait, rest, 3600, expiry=True)
            result["bind_all_s"] = round(time.monotonic() - started, 1)
            result[f"rss_mb_at_{CLAIMS}"] = memory.rss_mb(pid)
            result[f"caches_at_{CLAIMS}"] = cache_sizes(operator.metrics_text())
            progress(result)
            replenishing = time.monotonic()
            await asyncio.to_thread(wait_replenished, custom, namespace, pool_sizes(each), 1800)
            result["replenished_s"] = round(time.monotonic() - replenishing, 1)
            result["sequential_full"] = await asyncio.to_thread(
                sequential_binds, custom, watcher, namespace, "seq-full", operator, battery
            )
            progress(result)
            operator, restarted_at = await restart(operator, kubeconfig, battery.target)
            exit_stack.callback(operator.stop)
            reconciled = await asyncio.to_thread(
                wait_reconciled, operator, CLAIMS, started_at=restarted_at
            )
            result["restart_to_reconciled_s"] = reconciled.pop("seconds")
            result["restart"] = reconciled
            result["rss_mb_after_restart"] = memory.rss_mb(operator.popen.pid)
        finally:
            watcher.stop()
            api.close()
    empty, full = result["sequential_empty"], result["sequential_full"]
    result["p50_full_over_empty"] = round(full["p50_ms"] / empty["p50_ms"], 2)
    result["p99_full_over_empty"] = round(full["p99_ms"] / empty["p99_ms"], 2)
    result["loadavg"] = os.getloadavg()
    print()
    print(json.dumps(result))
    assert result[f"caches_at_{CLAIMS}"]["claims:bodies"] >= CLAIMS


async def restart(
    operator: OperatorProcess, kubeconfig: Path, target: str
) -> tuple[OperatorProcess, float]:
    """Kill the operator as a crash would and start another; it, and when it was started."""
    operator.kill()
    started = time.monotonic()
    new = await OperatorProcess.launch(
        kubeconfig=kubeconfig, battery_target=target, extra_args=PRODUCTION_LOGGING
    )
    return new, started


def wait_reconciled(
    operator: OperatorProcess, claims: int, *, started_at: float
) -> dict[str, float]:
    """Seconds from `started_at` until the new operator has made as many claim reconciles as
    there are claims: each listed claim is queued once at start, and a Bound one reads its
    Lease from battery at once (CL-030), so nothing else queues claims meanwhile. Also the
    longest its /metrics took to answer meanwhile (a busy event loop answers late; a read
    that times out after `http_get`'s 2 s is counted and asked again)."""
    deadline = time.monotonic() + 1800
    slowest = 0.0
    unanswered = 0
    while time.monotonic() < deadline:
        asked = time.monotonic()
        try:
            text = operator.metrics_text()
        except OSError:  # no answer within the read's timeout: the loop is still busy
            unanswered += 1
            continue
        finally:
            slowest = max(slowest, time.monotonic() - asked)
        if metric_sum(text, "battery_operator_reconcile_total", 'controller="claims"') >= claims:
            return {
                "seconds": round(time.monotonic() - started_at, 1),
                "slowest_metrics_answer_s": round(slowest, 2),
                "metrics_reads_timed_out": unanswered,
            }
        time.sleep(0.2)
    raise AssertionError("the restarted operator never reconciled every claim")


async def test_churn(controlplane: ControlPlane, tmp_path: Path) -> None:
    namespace = "bench-churn"
    api = admin_client(controlplane)
    custom = k8s.CustomObjectsApi(api)
    result: dict[str, Any] = {"bench": "operator_churn", "claims": CLAIMS, "wave": WAVE}
    reports = tmp_path / "memory.jsonl"
    probed = memory.probe_command(reports)
    async with stack(controlplane, tmp_path, probed) as (_kubeconfig, _battery, operator, _stack):
        k8s.CoreV1Api(api).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        )
        await asyncio.to_thread(make_pools, custom, namespace, WAVE // POOLS + 5, 600)
        watcher = BoundWatcher(api, namespace)
        pid = operator.popen.pid
        try:
            result["rss_mb_before"] = memory.rss_mb(pid)
            result["caches_before"] = cache_sizes(operator.metrics_text())
            result["memory_before"] = await asyncio.to_thread(memory.report, pid, reports)
            started = time.monotonic()
            for wave in range(0, CLAIMS, WAVE):
                claim_names = [f"churn-{i}" for i in range(wave, min(wave + WAVE, CLAIMS))]
                await asyncio.to_thread(create_many, custom, namespace, claim_names)
                await asyncio.to_thread(watcher.wait, claim_names, 600)
                await asyncio.to_thread(delete_and_wait, custom, namespace, claim_names)
                for name in claim_names:
                    watcher.bound.pop(name, None)
            result["churn_s"] = round(time.monotonic() - started, 1)
            progress(result)
            # The last deletes' watch events and Lease checks settle: the queue empties.
            await asyncio.to_thread(
                wait_quiet, operator, result["caches_before"].get("claims:bodies", 0)
            )
            result["rss_mb_after"] = memory.rss_mb(pid)
            result["caches_after"] = cache_sizes(operator.metrics_text())
            result["memory_after"] = await asyncio.to_thread(memory.report, pid, reports)
        finally:
            watcher.stop()
            api.close()
    result["loadavg"] = os.getloadavg()
    print()
    print(json.dumps(result))
    before, after = result["caches_before"], result["caches_after"]
    # Against the counts before the churn (the session's other test leaves its claims in the
    # API server). The queue's heap may keep a few entries of forgotten keys until it is
    # compacted (`WorkQueue.discard`): bounded, so checked apart.
    leftovers = {
        k: after[k] - before.get(k, 0)
        for k in after
        if k.startswith("claims:") and k != "claims:queue:heap" and after[k] > before.get(k, 0)
    }
    assert not leftovers, f"entries of deleted claims stayed: {leftovers}"
    assert after.get("claims:queue:heap", 0) <= before.get("claims:queue:heap", 0) + 64 + WAVE


def wait_quiet(operator: OperatorProcess, bodies: float) -> None:
    """Until the operator holds no more claim bodies than before (the last deletes' events
    came)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if cache_sizes(operator.metrics_text()).get("claims:bodies", 0) <= bodies:
            return
        time.sleep(0.5)
