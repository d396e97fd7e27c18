"""Our operator and agent-sandbox's controller, one after the other on the same API server.

On demand only: the test skips unless `BATTERYOP_BENCH_PEERS=1` (it builds the peer and kwok,
minutes cold, and runs for about half an hour with `BATTERYOP_BENCH=1`):

    BATTERYOP_BENCH_PEERS=1 BATTERYOP_BENCH=1 ./pants test --force --test-output=all \\
        tests/bench/peers/peers_bench.py -- -s

One kube-apiserver and etcd (the test control plane), our CRDs and the peer's manifests
installed (`agent_sandbox`), kwok's fake Nodes and kube-scheduler for the peer's Pods
(`cluster`). Then five runs in turn (`results.PLAN`): ours, the peer with its default flags,
ours, the peer tuned, ours; each controller runs only during its own run. Each run, in a
namespace of its own:

- the API server's floor first, with no controller running (`api_server_floor`: N of our
  claims created at once and marked Bound by the benchmark itself);
- a warm pool of N + 5 (ours: a Pool of that size; the peer: a SandboxWarmPool of that many
  replicas), waited for;
- N claims one at a time, then `ROUNDS` bursts of N at once from 16 client threads, through
  the same client, watch and timing (`bench.workload`); a claim counts when the namespace's
  watch first sees it Bound (ours) or `Ready=True` (the peer). Per burst: the API server's
  requests per claim and the CPU seconds of every process;
- between measurements the pool is full again: ours releases its claims and waits for the
  Pool; the peer's claims stay (nothing collects garbage without kube-controller-manager) and
  it waits until its pool has N + 5 ready replicas again beside the claimed ones.

With `BATTERYOP_BENCH=1` (N = 100) it writes the results file
`$BATTERYOP_BENCH_PEERS_RESULTS` (`docs/dev/results/peers-measured.json` of the checkout,
see pants.toml): each run, ours / peer per figure (`results.ratios`), the commit, the time,
the machine's load and every setting. A smaller run prints the same and writes nothing there.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench import claim_bind_bench as ours
from bench.peers import agent_sandbox, cluster, results
from bench.stats import FULL, latency_figures
from bench.workload import THREADS, Create, FirstSeen, at_once, mean_of, one_at_a_time
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane, admin_client, ensure_service_account
from batteryop.testing.localstack import HOSTS, prepare_cluster

N, ROUNDS = ours.N, ours.ROUNDS
POOL = "warm"
ENABLED = os.environ.get("BATTERYOP_BENCH_PEERS") == "1"
RESULTS = os.environ.get("BATTERYOP_BENCH_PEERS_RESULTS")
COMMAND = (
    "BATTERYOP_BENCH_PEERS=1 BATTERYOP_BENCH=1 ./pants test --force --test-output=all "
    "tests/bench/peers/peers_bench.py -- -s"
)
MACHINE = "the 2-core development machine, shared with other workers' builds and tests"


@dataclass
class Side:
    """One controller's side of the workload."""

    create: Create
    watcher: FirstSeen
    state: str
    """The watcher's state a claim counts in."""
    refill: Callable[[list[str]], None]
    """After a measurement, until the pool is full again (given the claims just made)."""
    pids: Mapping[str, int]


def measure(api: k8s.ApiClient, side: Side) -> dict[str, Any]:
    """N claims one at a time, then `ROUNDS` bursts of N at once: the same for both sides."""
    sent_at = one_at_a_time(side.create, side.watcher, [f"seq-{i}" for i in range(N)], side.state)
    sequential = side.watcher.since(sent_at, side.state)
    side.refill(list(sent_at))
    bursts = []
    for r in range(ROUNDS):
        claim_names = [f"par{r}-{i}" for i in range(N)]
        bursts.append(at_once(api, side.create, side.watcher, claim_names, side.state, side.pids))
        side.refill(claim_names)
    return {
        "sequential": latency_figures(sequential),
        "burst": {
            **latency_figures([x for b in bursts for x in b.latencies]),
            "rounds": [
                {**latency_figures(b.latencies), "claims_per_second": round(b.claims_per_second, 1)}
                for b in bursts
            ],
            "claims_per_second": round(statistics.median(b.claims_per_second for b in bursts), 1),
            "apiserver_requests_per_claim": mean_of([b.requests for b in bursts], 2),
            "cpu_seconds_per_burst": mean_of([b.cpu_seconds for b in bursts], 2),
        },
    }


def new_namespace(api: k8s.ApiClient, namespace: str) -> None:
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))


def floor(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """The API server's floor (`claim_bind_bench.api_server_floor`), its claims then removed:
    they hold our finalizer (the finalizer policy adds it) and no operator runs to release
    them, nor is there anything to release, so the benchmark takes it off itself."""
    figures = ours.api_server_floor(cp, namespace)
    api = admin_client(cp)
    try:
        custom = k8s.CustomObjectsApi(api)
        args = (names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL)
        custom.delete_collection_namespaced_custom_object(*args)
        listed: Any = custom.list_namespaced_custom_object(*args)
        for claim in listed["items"]:
            custom.patch_namespaced_custom_object(
                *args, claim["metadata"]["name"], {"metadata": {"finalizers": None}}
            )
        ours.wait_none_left(custom, namespace)
    finally:
        api.close()
    return figures


def remove_pool(custom: k8s.CustomObjectsApi, namespace: str) -> None:
    """Delete our Pool and wait until the operator has let it go."""
    custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, POOL
    )
    ours.wait_none_left(custom, namespace, names.POOL_PLURAL)


def run_ours(cp: ControlPlane, namespace: str, pids: Mapping[str, int]) -> dict[str, Any]:
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    new_namespace(api, namespace)
    ours.make_pool(custom, namespace, POOL, N + 5)
    ours.wait_pool_available(custom, namespace, N + 5, name=POOL)
    watcher = ours.BoundWatcher(api, namespace)
    try:
        side = Side(
            create=lambda n: ours.create(custom, namespace, n, POOL),
            watcher=watcher,
            state="bound",
            refill=lambda claim_names: ours.delete_all(custom, namespace, claim_names),
            pids=pids,
        )
        measured = measure(api, side)
        remove_pool(custom, namespace)
    finally:
        watcher.stop()
        api.close()
    return measured


def wait_refilled(api: k8s.ApiClient, namespace: str, claimed: int, timeout: float = 300) -> None:
    """Until the peer's pool has N + 5 ready replicas again and the namespace as many Ready
    Pods beside the `claimed` ones (its status alone may not have caught up with the claims
    yet)."""
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace).items
        ready = sum(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods
        )
        if ready >= claimed + N + 5:
            agent_sandbox.wait_pool_ready(custom, namespace, POOL, N + 5, timeout=timeout)
            return
        time.sleep(0.5)
    raise AssertionError(f"the peer's pool in {namespace} was never full again")


def run_peer(cp: ControlPlane, namespace: str, pids: Mapping[str, int]) -> dict[str, Any]:
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    new_namespace(api, namespace)
    # Its Pods run as the namespace's default ServiceAccount, which kube-controller-manager
    # would have made.
    ensure_service_account(api, namespace, "default")
    agent_sandbox.make_pool(custom, namespace, POOL, N + 5)
    wait_refilled(api, namespace, 0)
    watcher = FirstSeen(api, namespace, agent_sandbox.CLAIMS, {"ready": agent_sandbox.is_ready})
    claimed: list[str] = []

    def refill(claim_names: list[str]) -> None:
        claimed.extend(claim_names)
        wait_refilled(api, namespace, len(claimed))

    try:
        side = Side(
            create=lambda n: agent_sandbox.create_claim(custom, namespace, n, POOL),
            watcher=watcher,
            state="ready",
            refill=refill,
            pids=pids,
        )
        return measure(api, side)
    finally:
        watcher.stop()
        api.close()


def commit_of(path: Path) -> str:
    """The checkout's commit, marked when its tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


async def run_all(cp: ControlPlane, work: Path, commit: str) -> list[dict[str, Any]]:
    """`results.PLAN`, each run with its floor, provenance and figures."""
    prepare_cluster(cp, HOSTS)
    peer = agent_sandbox.ensure()
    agent_sandbox.install(cp, peer / "k8s")
    runs: list[dict[str, Any]] = []
    with cluster.pod_nodes(cp, work) as nodes:
        base = {p.name: p.popen.pid for p in cp._procs}
        base.update({d.name: d.pid for d in nodes})
        for i, (side, setting) in enumerate(results.PLAN, start=1):
            namespace = f"bench-run-{i}"
            load_before, started = load(), now()
            floor_figures = await asyncio.to_thread(floor, cp, f"bench-floor-{i}")
            if side == results.OURS:
                async with ours.operator_stack(cp, work) as (_, pids):
                    measured = await asyncio.to_thread(run_ours, cp, namespace, {**base, **pids})
                flags = [*ours.PRODUCTION_LOGGING, f"--bind-events={ours.BIND_EVENTS}"]
            else:
                with agent_sandbox.controller(cp, peer, setting, work) as process:
                    pids = {**base, "agent-sandbox": process.pid, "test (client)": os.getpid()}
                    measured = await asyncio.to_thread(run_peer, cp, namespace, pids)
                    process.check()
                flags = [*agent_sandbox.COMMON_FLAGS, *agent_sandbox.SETTINGS[setting]]
            for d in nodes:
                d.check()
            run = {
                "label": results.run_label(side, setting)
                + (f" {i // 2 + 1}" if side == results.OURS else ""),
                "side": side,
                "setting": setting or "our defaults",
                "flags": flags,
                "when": started,
                "commit": commit,
                "load": f"{load_before[0]}",
                "loadavg_1_5_15": {"before": load_before, "after": load()},
                "api_server_floor": floor_figures,
                **measured,
            }
            run["figures"] = results.figures(run)
            print(f"\n{run['label']}: {run['figures']}", flush=True)
            runs.append(run)
    return runs


@pytest.mark.skipif(
    not ENABLED, reason="on demand only: BATTERYOP_BENCH_PEERS=1 runs it (builds agent-sandbox)"
)
async def test_ours_and_agent_sandbox_in_turn_on_one_api_server(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    written = Path(RESULTS) if FULL and RESULTS else tmp_path / "peers-measured.json"
    commit = commit_of(written.parent) if FULL and RESULTS else "(a smoke run)"
    load_before, started = load(), now()
    runs = await run_all(controlplane, tmp_path, commit)
    document = results.document(
        runs,
        {
            "benchmark": "tests/bench/peers/peers_bench.py",
            "command": COMMAND,
            "machine": f"{MACHINE} ({os.cpu_count()} CPUs)",
            "how": (
                f"one kube-apiserver and etcd; in turn ours, agent-sandbox default, ours, "
                f"agent-sandbox tuned, ours; each: the API server's floor, a warm pool of "
                f"{N + 5}, {N} claims one at a time, {ROUNDS} bursts of {N} at once from "
                f"{THREADS} client threads; the peer's Pods on {cluster.NODES} kwok Nodes"
            ),
            "source": f"{written.name}, as the benchmark wrote it",
            "commit": commit,
            "when": started,
            "loadavg_1_5_15": {"before": load_before, "after": load()},
            "settings": {
                "n": N,
                "rounds": ROUNDS,
                "client_threads": THREADS,
                "peer": f"kubernetes-sigs/agent-sandbox {agent_sandbox.TARBALL.filename}",
                "peer_flags": {
                    s: [*agent_sandbox.COMMON_FLAGS, *f] for s, f in agent_sandbox.SETTINGS.items()
                },
                "kwok": f"{cluster.KWOK_MODULE} {cluster.kwok_version()}, stages: "
                + ", ".join(Path(s).stem for s in cluster.STAGES),
            },
        },
    )
    written.write_text(json.dumps(document, indent=1) + "\n")
    print(f"\nwrote {written}\n{json.dumps(document['ratios'])}")
    assert [r["side"] for r in runs] == [side for side, _ in results.PLAN]
    assert all(r["sequential"]["n"] == N and r["burst"]["n"] == N * ROUNDS for r in runs)
