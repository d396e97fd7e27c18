"""The whole stack for integration tests: the real control plane with the CRDs, two fake
flintlockd Hosts with their Nodes published, the fake battery, and the operator process."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from integration.stack import HOSTS, Stack
from kubernetes import client as k8s
from kubernetes import utils

from batteryop.api import crds, names
from batteryop.manifests import rbac
from batteryop.manifests.render import COMMON_LABELS
from batteryop.testing.controlplane import ControlPlane, install_crd
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.operator_runner import OperatorProcess


@pytest.fixture(scope="session")
def cluster(controlplane: ControlPlane) -> ControlPlane:
    """The control plane with the CRDs, the operator namespace and the Hosts' Nodes."""
    from batteryop.testing.controlplane import admin_client

    api = admin_client(controlplane)
    for crd in crds.all_crds():
        install_crd(api, crd)
    core = k8s.CoreV1Api(api)
    with contextlib.suppress(k8s.ApiException):
        core.create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=names.OPERATOR_NAMESPACE))
        )
    for host in HOSTS:
        labels = {names.HOST_LABEL: names.HOST_LABEL_VALUE, "kubernetes.io/arch": "amd64"}
        with contextlib.suppress(k8s.ApiException):
            core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=host, labels=labels)))
    # Until the host registry exists, the test publishes the Host set as it will.
    with contextlib.suppress(k8s.ApiException):
        core.create_namespaced_config_map(
            names.OPERATOR_NAMESPACE,
            k8s.V1ConfigMap(
                metadata=k8s.V1ObjectMeta(
                    name=names.BATTERY_CONFIG_MAP,
                    annotations={names.HOSTS_ANNOTATION: json.dumps(sorted(HOSTS))},
                )
            ),
        )
    # The operator's own identity and least-privilege RBAC, exactly as install.yaml has them,
    # so these tests fail if the operator needs a permission the Manifests do not grant.
    for obj in rbac.objects(namespace=names.OPERATOR_NAMESPACE, labels=COMMON_LABELS):
        with contextlib.suppress(k8s.ApiException):
            utils.create_from_dict(api, obj)
    api.close()
    return controlplane


def operator_kubeconfig(cp: ControlPlane, path: Path) -> Path:
    """A kubeconfig acting as the operator's ServiceAccount (a TokenRequest token)."""
    from batteryop.testing.controlplane import admin_client, request_token

    api = admin_client(cp)
    try:
        token = request_token(
            api, names.OPERATOR_NAMESPACE, rbac.OPERATOR_SERVICE_ACCOUNT, seconds=3600
        )
    finally:
        api.close()
    return cp.write_kubeconfig(path, token=token)


@pytest_asyncio.fixture
async def stack(cluster: ControlPlane, tmp_path: Path) -> AsyncIterator[Stack]:
    from batteryop.testing.controlplane import admin_client

    kubeconfig = operator_kubeconfig(cluster, tmp_path / "operator.kubeconfig")
    async with contextlib.AsyncExitStack() as stack:
        hosts = {
            name: await stack.enter_async_context(FakeFlintlockd.start(address=addr))
            for name, addr in HOSTS.items()
        }
        battery = await stack.enter_async_context(
            FakeBattery.start(hosts={name: h.target for name, h in hosts.items()})
        )
        operator = await stack.enter_async_context(
            OperatorProcess.start(kubeconfig=kubeconfig, battery_target=battery.target)
        )
        api = admin_client(cluster)
        stack.callback(api.close)
        yield Stack(cluster, api, battery, hosts, operator, kubeconfig)
