"""EA-050 on the real API server: SelfSubjectReview of real tokens, Pod-bound or not."""

from __future__ import annotations

import pytest

from batteryop.api import names
from batteryop.exec_agent.identity import IdentityError, check_identity
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    pod_bound_token,
    request_token,
)
from batteryop.testing.exec_agent import AGENT_NAMESPACE, NODE

pytestmark = pytest.mark.controlplane


def agent_token(cluster: ControlPlane, node: str | None) -> KubeConfig:
    api = admin_client(cluster)
    try:
        if node is None:
            token = request_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME)
        else:
            token = pod_bound_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME, node)
    finally:
        api.close()
    return KubeConfig.from_dict(cluster.kubeconfig(token=token))


@pytest.mark.req("EA-050")
async def test_an_identity_bound_to_a_pod_on_this_host_passes(cluster: ControlPlane) -> None:
    async with KubeClient(agent_token(cluster, NODE)) as kube:
        user = await check_identity(kube, NODE)
    assert user == f"system:serviceaccount:{AGENT_NAMESPACE}:{names.EXEC_AGENT_NAME}"


@pytest.mark.req("EA-050")
async def test_an_identity_naming_another_host_or_none_is_refused(cluster: ControlPlane) -> None:
    async with KubeClient(agent_token(cluster, "host-elsewhere")) as kube:
        with pytest.raises(IdentityError, match="names Node host-elsewhere"):
            await check_identity(kube, NODE)
    async with KubeClient(agent_token(cluster, None)) as kube:
        with pytest.raises(IdentityError, match="names no Node"):
            await check_identity(kube, NODE)
