"""Fixtures of the registry's tests: an admin client, the operator identity with install.yaml's
RBAC in a fresh namespace, and Nodes removed after each test (Nodes are cluster-wide, and the
next test's registry would see them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import NODES
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.host_registry_env import operator_identity


@pytest.fixture
async def kube(controlplane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as client:
        yield client
        for node in await client.list(NODES):
            try:
                await client.delete(NODES, node["metadata"]["name"])
            except NotFoundError:
                pass


@pytest.fixture
def registry_kubeconfig(controlplane: ControlPlane, namespace: str, tmp_path: Path) -> Path:
    """A kubeconfig acting as the operator's ServiceAccount, bound to install.yaml's rules."""
    return operator_identity(controlplane, namespace, tmp_path / "registry.kubeconfig")
