"""Fixtures of the agent's tests, over `batteryop.testing.exec_agent`: the real control plane
(prepared once per session), a PKI per test, a fake flintlockd process with mutual TLS, the agent
as a real TLS gRPC server acting as its own ServiceAccount, and `holders` in a fresh namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import ControlPlane, admin_client
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
    async with FakeFlintlockd.start(address=FLINTLOCKD_ADDRESS, tls=pki.flintlockd_tls) as host:
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
