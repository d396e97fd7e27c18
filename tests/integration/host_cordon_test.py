"""End to end: after `kubectl cordon` of a Host, no new claim lands on it (CL-103, IN-100,
BA-114), while the claims Bound before keep their MicroVMs.

Everything real but battery and flintlockd, as in `host_registry_test.py`: the control plane;
the operator and the host registry as processes acting as the operator's ServiceAccount; the
fake battery as a process (`BatteryPod`); two fake flintlockd Hosts over mutual TLS. Its own
file, so its control plane holds no Host Node another test left behind.

The fake battery hands out AVAILABLE MicroVMs oldest first (poolmgrd's choice is arbitrary): so
as many claims after the cordon as the Pool has warm MicroVMs reach every one on the cordoned
Host, and without the operator's check (CL-103) some would be Bound there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from integration.stack import condition, phase

from batteryop.api import names, samples
from batteryop.battery import BatteryClient
from batteryop.kube.client import KubeClient, Object
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CLAIMS, NODES, POOLS, Resource
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.host_registry_env import (
    BatteryPod,
    RegistryProcess,
    battery_client,
    create_host_node,
    published,
    until_configmap,
    until_listed,
)
from batteryop.testing.localstack import operator_kubeconfig, prepare_cluster
from batteryop.testing.operator_runner import OperatorProcess

HOSTS = {"cordon-a": "127.0.0.73", "cordon-b": "127.0.0.74"}
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
POOL_SIZE = 4
TIMEOUT = 90.0
MARK = "cordoned by the test"
"""The Exec Agent report message written together with the cordon (see the test)."""


def available(pools: Mapping[str, Object], want: int) -> bool:
    status = (pools.get("demo") or {}).get("status") or {}
    return int(status.get("available", 0)) >= want


async def until_battery(
    client: BatteryClient, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """battery's Hosts by name (ListHosts, which has no watch: polled) once `check` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        hosts = {s.host.name: s for s in await client.list_hosts()}
        if check(hosts):
            return hosts
        if loop.time() > deadline:
            raise AssertionError(f"battery: {what} not reached; last {hosts}")
        await asyncio.sleep(0.1)


@pytest.mark.req("CL-103", "IN-100", "BA-114", "EA-040")
async def test_claims_made_after_a_cordon_never_land_on_the_cordoned_host(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    prepare_cluster(controlplane, {}, publish_hosts=False)
    kubeconfig = operator_kubeconfig(controlplane, tmp_path / "operator.kubeconfig")
    namespace = "cordon"
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
        async with (
            BatteryPod.start(kube, names.OPERATOR_NAMESPACE) as pod,
            FakeFlintlockd.start(
                address=HOSTS["cordon-a"],
                tls=TLSFiles(*pod.host_tls("cordon-a", HOSTS["cordon-a"])),
            ) as host_a,
            FakeFlintlockd.start(
                address=HOSTS["cordon-b"],
                tls=TLSFiles(*pod.host_tls("cordon-b", HOSTS["cordon-b"])),
            ) as host_b,
        ):
            targets = {"cordon-a": host_a.target, "cordon-b": host_b.target}
            for name, target in targets.items():
                await create_host_node(
                    kube, name, address=target, extra_labels={"kubernetes.io/arch": "amd64"}
                )
            async with (
                RegistryProcess.start(pod, kubeconfig=kubeconfig, drain_timeout="60s"),
                OperatorProcess.start(
                    kubeconfig=kubeconfig, battery_target=pod.battery_address
                ) as operator,
            ):
                await until_configmap(
                    kube, names.OPERATOR_NAMESPACE, lambda c: len(published(c) or {}) == 2
                )
                pool = samples.demo_pool("demo", namespace)
                pool["spec"]["size"] = POOL_SIZE
                await kube.create(POOLS, pool, namespace)
                await until_listed(
                    kube, POOLS, namespace, lambda p: available(p, POOL_SIZE), timeout=TIMEOUT
                )

                # A claim Bound before the cordon: its Host is the one cordoned.
                claim = samples.sample_claim("before", pool="demo", namespace=namespace)
                await kube.create(CLAIMS, claim, namespace)
                claims = await until_listed(
                    kube,
                    CLAIMS,
                    namespace,
                    lambda c: phase(c.get("before")) == "Bound",
                    timeout=TIMEOUT,
                )
                before = claims["before"]["status"]
                cordoned = before["host"]["nodeName"]
                await until_listed(
                    kube, POOLS, namespace, lambda p: available(p, POOL_SIZE), timeout=TIMEOUT
                )

                async with battery_client(pod) as battery:
                    hosts = await until_battery(battery, lambda h: len(h) == 2, "two Hosts")
                    assert hosts[cordoned].vm_count >= 2, "warm MicroVMs beside the Bound one"

                    # `kubectl cordon`, with the report's message changed in the same write:
                    # once the claim Bound there shows it (HostReady, CL-050), the operator's
                    # Node cache holds the cordoned Node. Claims made from then on are what
                    # CL-103 covers (`claims/cordoned.py` names the window before it).
                    await kube.patch(
                        NODES,
                        cordoned,
                        {
                            "spec": {"unschedulable": True},
                            "metadata": {
                                "annotations": {names.EXEC_AGENT_MESSAGE_ANNOTATION: MARK}
                            },
                        },
                    )
                    await until_listed(
                        kube,
                        CLAIMS,
                        namespace,
                        lambda c: (condition(c.get("before"), "HostReady") or {}).get("message")
                        == MARK,
                        timeout=TIMEOUT,
                    )
                    # IN-100: and battery places nothing new there.
                    await until_battery(
                        battery, lambda h: h[cordoned].host.cordoned, "the Host cordoned"
                    )

                    after = [f"after-{n}" for n in range(POOL_SIZE)]
                    for name in after:
                        claim = samples.sample_claim(name, pool="demo", namespace=namespace)
                        await kube.create(CLAIMS, claim, namespace)
                    claims = await until_listed(
                        kube,
                        CLAIMS,
                        namespace,
                        lambda c: all(phase(c.get(n)) == "Bound" for n in after),
                        timeout=2 * TIMEOUT,
                    )
                    landed = {n: claims[n]["status"]["host"]["nodeName"] for n in after}
                    assert cordoned not in landed.values(), landed

                    # The claim Bound before the cordon keeps its Lease and MicroVM.
                    still = claims["before"]["status"]
                    assert phase(claims["before"]) == "Bound"
                    assert (still["leaseID"], still["microVM"]["uid"]) == (
                        before["leaseID"],
                        before["microVM"]["uid"],
                    )
                    leases = {lease.lease_id for lease in await battery.list_leases()}
                    assert before["leaseID"] in leases
                    # The cordoned Host's warm MicroVMs were given back; its Bound one stays.
                    hosts = {s.host.name: s for s in await battery.list_hosts()}
                    assert hosts[cordoned].vm_count == 1, hosts[cordoned]
                    on_host = {
                        vm.spec.uid
                        for vm in await (host_a if cordoned == "cordon-a" else host_b).list_vms()
                        if vm.status.state != 3  # DELETING
                    }
                    assert on_host == {before["microVM"]["uid"]}
                    assert "Gave back a MicroVM on a cordoned Host" in operator.logs()
