"""End to end: the operator places Pools on the Hosts the host registry publishes.

Everything real but battery and flintlockd: the control plane; the operator and the host
registry as processes, each acting as the operator's ServiceAccount with install.yaml's RBAC;
the fake battery as a process the registry restarts (`BatteryPod` plays the kubelet); two fake
flintlockd Hosts reached by battery over mutual TLS with the certificates the registry names in
battery's config. No Host set is published by hand.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from integration.stack import ready

from batteryop.api import names, samples
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import POOLS, Resource
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.host_registry_env import (
    BatteryPod,
    RegistryProcess,
    battery_client,
    create_host_node,
    published,
    set_report,
    until_configmap,
    until_listed,
)
from batteryop.testing.localstack import operator_kubeconfig, prepare_cluster
from batteryop.testing.operator_runner import OperatorProcess

HOSTS = {"e2e-a": "127.0.0.71", "e2e-b": "127.0.0.72"}
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)


async def battery_pool_hosts(pod: BatteryPod, namespace: str) -> list[tuple[str, ...]]:
    async with battery_client(pod) as client:
        return [tuple(sorted(p.spec.flintlock_hosts)) for p in await client.list_pools(namespace)]


@pytest.mark.req("IN-001", "IN-003", "IN-004", "IN-013", "PO-010")
async def test_pools_are_placed_on_the_hosts_the_registry_publishes(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    prepare_cluster(controlplane, {}, publish_hosts=False)
    kubeconfig = operator_kubeconfig(controlplane, tmp_path / "operator.kubeconfig")
    namespace = "e2e-pools"
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
        async with (
            BatteryPod.start(kube, names.OPERATOR_NAMESPACE) as pod,
            FakeFlintlockd.start(
                address=HOSTS["e2e-a"], tls=TLSFiles(*pod.host_tls("e2e-a", HOSTS["e2e-a"]))
            ) as host_a,
            FakeFlintlockd.start(
                address=HOSTS["e2e-b"], tls=TLSFiles(*pod.host_tls("e2e-b", HOSTS["e2e-b"]))
            ) as host_b,
        ):
            targets = {"e2e-a": host_a.target, "e2e-b": host_b.target}
            for name, target in targets.items():
                await create_host_node(
                    kube, name, address=target, extra_labels={"kubernetes.io/arch": "amd64"}
                )
            async with (
                RegistryProcess.start(
                    pod,
                    kubeconfig=kubeconfig,
                    drain_timeout="60s",
                ) as registry,
                OperatorProcess.start(
                    kubeconfig=kubeconfig, battery_target=pod.battery_address
                ) as operator,
            ):
                cm = await until_configmap(
                    kube, names.OPERATOR_NAMESPACE, lambda c: len(published(c) or {}) == 2
                )
                assert published(cm) == targets
                await kube.create(POOLS, samples.demo_pool("demo", namespace), namespace)
                # Ready counts provisioning MicroVMs too (PO-022): wait for one available.
                pools = await until_listed(
                    kube,
                    POOLS,
                    namespace,
                    lambda p: ready(p.get("demo"))
                    and ((p["demo"] or {}).get("status") or {}).get("available", 0) >= 1,
                    timeout=90,
                )
                body = pools["demo"]
                assert body["status"]["available"] >= 1
                assert await battery_pool_hosts(pod, namespace) == [("e2e-a", "e2e-b")]

                # A Host leaves: the Pool leaves it first, then battery is restarted.
                starts = len(pod.starts)
                left = time.monotonic()
                await set_report(kube, "e2e-b", targets["e2e-b"], ready=False)
                await until_configmap(
                    kube,
                    names.OPERATOR_NAMESPACE,
                    lambda c: set(published(c) or {}) == {"e2e-a"},
                )
                start = await pod.wait_starts(starts + 1, timeout=90)
                assert start.at - left < 60, "the drain ended by the Pool, not its timeout"
                assert "Drain timed out" not in registry.logs(), registry.logs()[-3000:]
                assert operator.popen.poll() is None
