"""Pytest fixtures shared by suites in different folders, imported by their `conftest.py`
(`from batteryop.testing.fixtures import pki, flintlockd, ...  # noqa: F401`), so each is
written once.

The Exec Agent's world, over `batteryop.testing.exec_agent`: `cluster`, the real control plane
prepared for the agent once per session; `pki`, a PKI per test; `flintlockd`, a fake flintlockd
process with mutual TLS, serving exec and the SSH proxy; `agent_identity`, the agent's own ServiceAccount credentials; `agent`,
the agent as a real TLS gRPC server acting as that identity; `holders`, claims and their tokens
in a fresh namespace.

The CSR approver's world, over `batteryop.testing.csr_approver_env`: `csr_cluster`, the CAs,
their Secrets and the approver's identity in a fresh namespace of the real control plane.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.csr_approver_env import Cluster, make_cluster
from batteryop.testing.exec_agent import (
    FLINTLOCKD_ADDRESS,
    Agent,
    Holders,
    Pki,
    agent_kube_config,
    make_pki,
    prepare_cluster,
    running_agent,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest_asyncio.fixture
async def flintlockd(pki: Pki) -> AsyncIterator[FakeFlintlockd]:
    async with FakeFlintlockd.start(
        address=FLINTLOCKD_ADDRESS, tls=pki.flintlockd_tls, ssh_proxy=True
    ) as host:
        yield host


@pytest.fixture(scope="session")
def cluster(controlplane: ControlPlane) -> ControlPlane:
    return prepare_cluster(controlplane)


@pytest.fixture
def agent_identity(cluster: ControlPlane) -> KubeConfig:
    """The agent's own credentials: its ServiceAccount's token, its RBAC only."""
    return agent_kube_config(cluster)


@pytest_asyncio.fixture
async def agent(
    pki: Pki, agent_identity: KubeConfig, flintlockd: FakeFlintlockd
) -> AsyncIterator[Agent]:
    async with running_agent(pki, agent_identity, flintlockd.target) as running:
        yield running


@pytest.fixture
def holders(
    cluster: ControlPlane, namespace: str, flintlockd: FakeFlintlockd, pki: Pki
) -> Iterator[Holders]:
    api = admin_client(cluster)
    try:
        yield Holders(api, namespace, flintlockd, pki)
    finally:
        api.close()


@pytest_asyncio.fixture
async def csr_cluster(controlplane: ControlPlane, namespace: str) -> AsyncIterator[Cluster]:
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        c = await make_cluster(controlplane, kube, namespace)
        try:
            yield c
        finally:
            await c.cleanup()
