"""Time from a Node turning ready to its Host being in battery, with and without a restart.

The real kube-apiserver, the host registry as its own process (its pex, production settings
but a settle time and restart window of 0, so the figure is the registry's own work plus
battery's), and the fake battery as a process (`BatteryPod` plays the kubelet).

- `restart`: battery v0.4.0 (host RPCs UNIMPLEMENTED): the registry writes the config, waits
  for its mount to show it, signals battery, waits for the new process to answer with the Host.
- `host_api`: battery with AddHost: one `AddHost` call (battery dials the Host's flintlockd over
  mutual TLS and checks its version), no restart.

Each round: a Node whose report says not ready exists; the benchmark patches its report to
ready (t0) and waits, on a watch of the battery config ConfigMap, for the Host to appear in the
published Host set, which the registry writes only once battery has the Host (t1). The Node is
then made not ready again and the benchmark waits until battery has let the Host go. Prints one
JSON object with p50 and p99 per mode, and the registry's CPU seconds and resident memory
(`registry_usage`, from /proc): once started, over `IDLE_SECONDS` at rest (60 s with
BATTERYOP_BENCH=1) and over the rounds. BATTERYOP_BENCH=1 runs 30 rounds per mode; otherwise 3.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from bench.stats import FULL, IDLE_SECONDS, Usage, cpu_seconds, latency_figures, memory_mb

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import Resource
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.host_registry_env import (
    BatteryPod,
    RegistryProcess,
    create_host_node,
    operator_identity,
    published,
    set_report,
    until_configmap,
)

ROUNDS = 30 if FULL else 3
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
ADDRESS = "127.0.0.81"


async def _rounds(
    kube: KubeClient, namespace: str, kubeconfig: Path, *, host_api: bool, node: str
) -> tuple[list[float], dict[str, Any]]:
    times = []
    usage: dict[str, Any] = {}
    async with BatteryPod.start(kube, namespace, host_api=host_api) as pod:
        cert, key, ca = pod.host_tls(node, ADDRESS)
        async with (
            FakeFlintlockd.start(address=ADDRESS, tls=TLSFiles(cert, key, ca)) as host,
            RegistryProcess.start(pod, kubeconfig=kubeconfig) as registry,
        ):
            await create_host_node(kube, node, address=host.target, ready=False)
            await until_configmap(kube, namespace, lambda c: published(c) == {})
            pid = registry.popen.pid
            usage["started"] = {"cpu_s": round(cpu_seconds(pid), 2), **memory_mb(pid)}
            # At rest: one Host not ready, nothing to do (the wait is the figure).
            meter = Usage(pid)
            await asyncio.sleep(IDLE_SECONDS)
            usage[f"idle_{IDLE_SECONDS:.0f}s"] = meter.figures()
            meter = Usage(pid)
            for _ in range(ROUNDS):
                started = time.monotonic()
                await set_report(kube, node, host.target, ready=True)
                await until_configmap(kube, namespace, lambda c: node in (published(c) or {}))
                times.append(time.monotonic() - started)
                seen = len(pod.starts)
                await set_report(kube, node, host.target, ready=False)
                await until_configmap(kube, namespace, lambda c: published(c) == {})
                if not host_api:
                    await pod.wait_starts(seen + 1)  # battery has let it go
            usage["rounds"] = meter.figures()
            restarts = len(pod.starts) - 1
    assert restarts == (0 if host_api else 2 * ROUNDS), restarts
    return times, usage


async def test_node_ready_to_host_in_battery(controlplane: ControlPlane, tmp_path: Path) -> None:
    out: dict[str, object] = {"rounds": ROUNDS}
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        for mode, host_api in (("restart", False), ("host_api", True)):
            namespace = f"bench-registry-{mode.replace('_', '-')}"
            await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
            kubeconfig = operator_identity(controlplane, namespace, tmp_path / f"{mode}.kubeconfig")
            times, usage = await _rounds(
                kube,
                namespace,
                kubeconfig,
                host_api=host_api,
                node=f"bench-{mode.replace('_', '-')}",
            )
            out[mode] = {**latency_figures(times), "registry_usage": usage}
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps({"host_registry_node_ready_to_battery": out}))
