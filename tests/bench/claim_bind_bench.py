"""Create-to-Bound latency of MicroVMClaims against a warm Pool, through the whole stack.

The real kube-apiserver with install.yaml's finalizer policy and RBAC, the operator as its own
process, the fake battery as its own process (as poolmgrd would be, so it does not share this
process's interpreter with the benchmark's client) and two fake flintlockd Hosts; the stack
of `batteryop.testing.localstack`. The Hosts' Nodes carry a ready Exec Agent report, as a
healthy Host's would (the Exec Agent itself is not run). A watch on the namespace
records when each claim is first seen Bound; latency is that minus the moment its create
request was sent. Two runs: N claims one at a time (each waits for the previous to bind),
then N at once (created from a thread pool), ROUNDS times, each burst released before the
next. First, before the operator starts, the API
server's floor: N claims created at once and marked Bound by a status write from the benchmark
itself (`api_server_floor`). Prints one JSON object:

    {"bench": "claim_bind", "sequential": {"n": 100, "p50_ms": ..., "p99_ms": ...},
     "sequential_expiry": {"n": 100, "p50_ms": ..., "p99_ms": ...},
     "concurrent": {"n": 100, "p50_ms": ..., "p99_ms": ..., "claims_per_second": ...,
                    "apiserver_requests_per_claim": {...},
                    "apiserver_requests_per_claim_settled": {...}, ...},
     "api_server_floor": {"n": 100, "p50_ms": ..., "p99_ms": ..., "claims_per_second": ...}}

Requests per claim are counted twice: from the burst's first create until every claim is
Bound (`apiserver_requests_per_claim`), and until every claim also records its Lease's expiry
(`..._settled`: the expiry read right after the bind, CL-016, and its status write).
`sequential_expiry` is create to that expiry for the claims made one at a time. A client
(`batteryop.client`) and the Exec Agent count a claim usable from its Bound write
(`sequential`): the expiry is waited for only after a short grace (EA-013,
`ClaimStatus.lease_good_until`).

BATTERYOP_BENCH=1 runs N=100 (the issue's target: p50 <= 100 ms, p99 <= 300 ms with 100 at
once); otherwise N=10 as a smoke run that proves the benchmark works.
BATTERYOP_BENCH_PYSPY=<py-spy binary> prints the operator's and the fake battery's top frames
over the bursts (`bench.profiles`).
BATTERYOP_BENCH_BIND_EVENTS=true runs the operator with `--bind-events=true` (default: false, as
the operator).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from pathlib import Path
from typing import Any

from bench.profiles import recording
from bench.stats import FULL, latency_figures
from kubernetes import client as k8s
from kubernetes import watch

from batteryop.api import names, samples
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.fake_battery.process import FakeBatteryProcess
from batteryop.testing.localstack import (
    HOSTS,
    operator_kubeconfig,
    prepare_cluster,
    start_hosts,
)
from batteryop.testing.operator_runner import OperatorProcess

N = 100 if FULL else 10
BIND_EVENTS = os.environ.get("BATTERYOP_BENCH_BIND_EVENTS", "false")
"""The operator's `--bind-events` (`true` measures a bind with a Normal Event each)."""
ROUNDS = 3 if FULL else 1
"""Bursts of N claims at once; the concurrent figures are over all of their claims."""


PRODUCTION_LOGGING = ("--log-format=json", "--log-level=info")
"""The operator's own defaults (the test stack's operator logs text at debug level)."""


class BoundWatcher:
    """Records, per claim name, the monotonic time it was first seen Bound, and first seen
    recording its Lease's expiry."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self.expiry: dict[str, float] = {}
        self._cond = threading.Condition()
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: k8s.ApiClient, namespace: str) -> None:
        # A watch the API server ends or breaks (a loaded server does) is opened again; a new
        # watch starts with every claim as it is, so no Bound claim is missed.
        while not self._stopped.is_set():
            try:
                self._follow(api, namespace)
            except Exception as e:  # any broken stream: watch again
                print(f"BoundWatcher: watch ended ({e!r}); watching again", flush=True)
                self._watch = watch.Watch()

    def _follow(self, api: k8s.ApiClient, namespace: str) -> None:
        custom = k8s.CustomObjectsApi(api)
        for event in self._watch.stream(
            custom.list_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            timeout_seconds=600,
        ):
            obj = event["object"]
            status = obj.get("status") or {}
            if status.get("phase") == "Bound":
                with self._cond:
                    now = time.monotonic()
                    self.bound.setdefault(obj["metadata"]["name"], now)
                    if status.get("leaseExpiresAt"):
                        self.expiry.setdefault(obj["metadata"]["name"], now)
                    self._cond.notify_all()

    def wait(self, claim_names: list[str], timeout: float, *, expiry: bool = False) -> None:
        seen = self.expiry if expiry else self.bound
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(n in seen for n in claim_names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in claim_names if n not in seen]
                    raise AssertionError(f"{len(missing)} claims never bound: {missing[:5]}")
                self._cond.wait(left)

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()


def create(
    custom: k8s.CustomObjectsApi, namespace: str, name: str, pool: str = "warm", *fallback: str
) -> float:
    """Create claim `name` on `pool` (then the `fallback` Pools); the moment it was sent."""
    body = samples.sample_claim(name=name, pool=pool, namespace=namespace)
    if fallback:
        body["spec"]["fallbackPoolRefs"] = [{"name": p} for p in fallback]
    sent = time.monotonic()
    custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, body
    )
    return sent


def make_pool(
    custom: k8s.CustomObjectsApi,
    namespace: str,
    name: str,
    size: int | None,
    *,
    autoscaling: dict[str, Any] | None = None,
) -> None:
    """The demo Pool as `name` with `size` MicroVMs (or sized by `autoscaling`, its
    spec.autoscaling, when `size` is None) and no create hook: the hook runs a process per
    replenished MicroVM inside the fake flintlockd, which shares this machine here but runs on
    the Hosts in a cluster."""
    pool = samples.demo_pool(name=name, namespace=namespace)
    if size is None:
        pool["spec"].pop("size")
        pool["spec"]["autoscaling"] = autoscaling
    else:
        pool["spec"]["size"] = size
    pool["spec"].pop("hooks", None)
    custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, pool
    )


def wait_pool_available(
    custom: k8s.CustomObjectsApi,
    namespace: str,
    size: int,
    *,
    name: str = "warm",
    deadline: float | None = None,
) -> None:
    """Until the Pool `name` has `size` MicroVMs available and none provisioning, as battery
    reports them through the Pool's status (by `deadline`, default three minutes)."""
    deadline = time.monotonic() + 180 if deadline is None else deadline
    while time.monotonic() < deadline:
        body: Any = custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, name
        )
        status = body.get("status") or {}
        if status.get("available", 0) >= size and status.get("provisioning", 0) == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"Pool {name} never had {size} available MicroVMs")


def wait_claims_gone(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        listed: Any = custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
        )
        if not listed["items"]:
            return
        time.sleep(0.2)
    raise AssertionError("the deleted claims were never released")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_server_floor(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """The API server's share alone: N claims created at once, each marked Bound right away by
    a status write from here, with no operator and no battery running. Nothing that writes one
    claim and its status per claim can bind faster on this machine: the floor under the
    concurrent figures."""
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    watcher = BoundWatcher(api, namespace)

    def create_and_bind(name: str) -> float:
        sent = create(custom, namespace, name)
        custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            name,
            {
                "status": {
                    "phase": "Bound",
                    "leaseID": f"lease-{name}",
                    "microVM": {"uid": f"vm-{name}"},
                    "host": {"nodeName": "host-a"},
                }
            },
        )
        return sent

    try:
        claim_names = [f"floor-{i}" for i in range(N)]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=16) as pool_exec:
            sent_at = dict(
                zip(claim_names, pool_exec.map(create_and_bind, claim_names), strict=True)
            )
        watcher.wait(claim_names, 120)
        elapsed = max(watcher.bound[n] for n in claim_names) - started
        latencies = [watcher.bound[n] - sent_at[n] for n in claim_names]
    finally:
        watcher.stop()
        api.close()
    return {**latency_figures(latencies), "claims_per_second": round(N / elapsed, 1)}


def prometheus_sums(
    text: str, metric: str, key: Callable[[dict[str, str]], str]
) -> dict[str, float]:
    """Sum of `metric`'s samples in Prometheus text, by `key(labels)`."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        labels_text, value = line[len(metric) + 1 :].rsplit("} ", 1)
        labels = dict(
            part.split("=", 1) for part in labels_text.replace('"', "").split(",") if "=" in part
        )
        sums[key(labels)] = sums.get(key(labels), 0.0) + float(value)
    return sums


def means_between(
    before: str, after: str, metric: str, key: Callable[[dict[str, str]], str]
) -> dict[str, tuple[float, float]]:
    """For a Prometheus histogram or summary `metric`, scraped twice: per `key(labels)`, the
    mean milliseconds of the observations made between the scrapes, and how many there were
    (keys with none are left out)."""

    def delta(suffix: str) -> dict[str, float]:
        then = prometheus_sums(before, metric + suffix, key)
        now = prometheus_sums(after, metric + suffix, key)
        return {k: v - then.get(k, 0.0) for k, v in now.items()}

    seconds, counts = delta("_sum"), delta("_count")
    return {k: (1000 * seconds[k] / n, n) for k, n in counts.items() if n > 0}


def operator_timings(before: str, after: str) -> dict[str, float]:
    """Mean milliseconds of battery calls by RPC and of claim reconciles, between two scrapes."""
    out: dict[str, float] = {}
    for metric, label, prefix in [
        ("battery_operator_battery_call_seconds", "rpc", ""),
        ("battery_operator_reconcile_seconds", "controller", "reconcile_"),
    ]:
        means = means_between(before, after, metric, itemgetter(label))
        for k, (mean_ms, calls) in means.items():
            out[f"{prefix}{k}_mean_ms"] = round(mean_ms, 1)
            out[f"{prefix}{k}_n"] = calls
    return out


def apiserver_metrics(api: k8s.ApiClient) -> str:
    """The API server's /metrics, as Prometheus text."""
    response = api.rest_client.request("GET", f"{api.configuration.host}/metrics")
    return str(response.read().decode())


def request_kind(labels: dict[str, str]) -> str:
    """An API server request's kind, "VERB resource[/sub]"."""
    sub = labels.get("subresource")
    return f'{labels.get("verb")} {labels.get("resource")}' + (f"/{sub}" if sub else "")


def apiserver_requests(api: k8s.ApiClient) -> dict[str, float]:
    """apiserver_request_total from the API server's /metrics, keyed "VERB resource[/sub]"."""
    return prometheus_sums(apiserver_metrics(api), "apiserver_request_total", request_kind)


def apiserver_request_means(before: str, after: str, kinds: list[str]) -> dict[str, float]:
    """Mean milliseconds the API server spent on each request of `kinds` between two scrapes
    of its /metrics (its own apiserver_request_duration_seconds, so the client's and the
    network's share is not in it)."""
    means = means_between(before, after, "apiserver_request_duration_seconds", request_kind)
    return {f"{k} mean_ms": round(means[k][0], 1) for k in kinds if k in means}


def delete_all(custom: k8s.CustomObjectsApi, namespace: str, claim_names: list[str]) -> None:
    """Delete the claims and wait until they are released and the Pool is full again, so no
    release overlaps the next measurement."""
    for name in claim_names:
        custom.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, name
        )
    wait_claims_gone(custom, namespace)
    wait_pool_available(custom, namespace, N)


def burst(
    api: k8s.ApiClient,
    watcher: BoundWatcher,
    namespace: str,
    round_no: int,
    pids: dict[str, int],
    scrape: Callable[[], str],
) -> dict[str, Any]:
    """N claims created at once (16 client threads); their latencies and what they cost."""
    custom = k8s.CustomObjectsApi(api)
    claim_names = [f"par{round_no}-{i}" for i in range(N)]
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    requests_before = apiserver_requests(api)
    metrics_before = scrape()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool_exec:
        sent_at = dict(
            zip(
                claim_names,
                pool_exec.map(lambda n: create(custom, namespace, n), claim_names),
                strict=True,
            )
        )
    created_in = time.monotonic() - started
    watcher.wait(claim_names, 120)
    elapsed = max(watcher.bound[n] for n in claim_names) - started
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    requests_after = apiserver_requests(api)
    timings = operator_timings(metrics_before, scrape())
    watcher.wait(claim_names, 120, expiry=True)
    requests_settled = apiserver_requests(api)
    cpu_settled = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    delete_all(custom, namespace, claim_names)
    return {
        "latencies": [watcher.bound[n] - sent_at[n] for n in claim_names],
        "claims_per_second": N / elapsed,
        "create_requests_s": created_in,
        "cpu_seconds": cpu,
        "requests": per_claim(requests_before, requests_after),
        "requests_settled": per_claim(requests_before, requests_settled),
        "cpu_seconds_settled": cpu_settled,
        "operator_timings": timings,
    }


def per_claim(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """API requests per claim between two counts, by kind, and their total."""
    out = {
        key: (count - before.get(key, 0)) / N
        for key, count in sorted(after.items())
        if count > before.get(key, 0) and key != "GET metrics"
    }
    return {**out, "total": sum(out.values())}


def mean_of(dicts: list[dict[str, float]], ndigits: int) -> dict[str, float]:
    keys = sorted({k for d in dicts for k in d})
    return {k: round(statistics.fmean(d.get(k, 0.0) for d in dicts), ndigits) for k in keys}


def run_bench(
    cp: ControlPlane, namespace: str, pids: dict[str, int], scrape: Callable[[], str]
) -> dict[str, Any]:
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    make_pool(custom, namespace, "warm", N + 5)
    wait_pool_available(custom, namespace, N + 5)
    watcher = BoundWatcher(api, namespace)
    try:
        sequential, expiry = [], []
        for i in range(N):
            name = f"seq-{i}"
            sent = create(custom, namespace, name)
            watcher.wait([name], 60, expiry=True)
            sequential.append(watcher.bound[name] - sent)
            expiry.append(watcher.expiry[name] - sent)
        delete_all(custom, namespace, [f"seq-{i}" for i in range(N)])
        python_pids = {k: pids[k] for k in ("operator", "fake-battery")}
        with recording(python_pids, "bursts"):
            bursts = [burst(api, watcher, namespace, r, pids, scrape) for r in range(ROUNDS)]
    finally:
        watcher.stop()
        api.close()
    return {
        "bench": "claim_bind",
        "sequential": latency_figures(sequential),
        # Bound with the Lease's expiry recorded (CL-016), the second status write.
        "sequential_expiry": latency_figures(expiry),
        "concurrent": {
            **latency_figures([x for b in bursts for x in b["latencies"]]),
            "rounds": [
                {
                    **latency_figures(b["latencies"]),
                    "claims_per_second": round(b["claims_per_second"], 1),
                }
                for b in bursts
            ],
            "claims_per_second": round(
                statistics.median(b["claims_per_second"] for b in bursts), 1
            ),
            "create_requests_s": round(
                statistics.median(b["create_requests_s"] for b in bursts), 2
            ),
            "cpu_seconds_per_round": mean_of([b["cpu_seconds"] for b in bursts], 2),
            "cpu_seconds_per_round_settled": mean_of([b["cpu_seconds_settled"] for b in bursts], 2),
            "apiserver_requests_per_claim": mean_of([b["requests"] for b in bursts], 2),
            "apiserver_requests_per_claim_settled": mean_of(
                [b["requests_settled"] for b in bursts], 2
            ),
            "operator_timings": mean_of([b["operator_timings"] for b in bursts], 1),
        },
    }


def report_agents_ready(cp: ControlPlane) -> None:
    """Each Host's Node as a healthy Exec Agent would annotate it (ready, with an address)."""
    api = admin_client(cp)
    try:
        for node, address in HOSTS.items():
            k8s.CoreV1Api(api).patch_node(
                node,
                {
                    "metadata": {
                        "annotations": {
                            names.EXEC_AGENT_READY_ANNOTATION: names.EXEC_AGENT_READY_TRUE,
                            names.EXEC_AGENT_ADDRESS_ANNOTATION: f"{address}:7070",
                        }
                    }
                },
            )
    finally:
        api.close()


@contextlib.asynccontextmanager
async def operator_stack(
    controlplane: ControlPlane, tmp_path: Path
) -> AsyncIterator[tuple[OperatorProcess, dict[str, int]]]:
    """The fake flintlockd Hosts, the fake battery and the operator (production logging) as
    their own processes on `controlplane`; the operator, and the pid of every process."""
    report_agents_ready(controlplane)
    kubeconfig = operator_kubeconfig(controlplane, tmp_path / "operator.kubeconfig")
    async with contextlib.AsyncExitStack() as stack:
        flintlocks = await start_hosts(stack, HOSTS)
        battery = await stack.enter_async_context(
            FakeBatteryProcess.start(hosts={name: f.target for name, f in flintlocks.items()})
        )
        operator = await stack.enter_async_context(
            OperatorProcess.start(
                kubeconfig=kubeconfig,
                battery_target=battery.target,
                extra_args=[*PRODUCTION_LOGGING, f"--bind-events={BIND_EVENTS}"],
            )
        )
        pids = {p.name: p.popen.pid for p in controlplane._procs}
        pids["operator"] = operator.popen.pid
        pids["fake-battery"] = battery.pid
        pids["test+fake-flintlockd"] = os.getpid()
        yield operator, pids


async def run_on_stack(
    controlplane: ControlPlane,
    tmp_path: Path,
    bench: Callable[[ControlPlane, str], dict[str, Any]],
    namespace: str,
) -> dict[str, Any]:
    """`bench(controlplane, namespace)` in a thread, with the operator's stack running; its
    result, with the machine's load, printed as one JSON line and returned."""
    prepare_cluster(controlplane, HOSTS)
    async with operator_stack(controlplane, tmp_path):
        result = await asyncio.to_thread(bench, controlplane, namespace)
    result["loadavg_1_5_15"] = [round(x, 1) for x in os.getloadavg()]  # a shared machine
    print()
    print(json.dumps(result))
    return result


async def test_claims_bind_against_a_warm_pool(controlplane: ControlPlane, tmp_path: Path) -> None:
    prepare_cluster(controlplane, HOSTS)
    floor = await asyncio.to_thread(api_server_floor, controlplane, "bench-floor")
    async with operator_stack(controlplane, tmp_path) as (operator, pids):
        result = await asyncio.to_thread(
            run_bench, controlplane, "bench-claims", pids, operator.metrics_text
        )
    result["api_server_floor"] = floor
    result["bind_events"] = BIND_EVENTS
    result["loadavg_1_5_15"] = [round(x, 1) for x in os.getloadavg()]  # a shared machine
    print()
    print(json.dumps(result))
    assert result["sequential"]["n"] == N
    assert result["concurrent"]["n"] == N * ROUNDS
