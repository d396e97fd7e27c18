"""The `cluster` fixture of the approver's tests: see `batteryop.testing.csr_approver_env`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.csr_approver_env import Cluster, make_cluster


@pytest.fixture
async def cluster(controlplane: ControlPlane, namespace: str) -> AsyncIterator[Cluster]:
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        c = await make_cluster(controlplane, kube, namespace)
        try:
            yield c
        finally:
            await c.cleanup()
