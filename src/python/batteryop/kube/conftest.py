"""Fixtures of the kube client tests: admin and ServiceAccount clients of the real control plane,
and the project's CRDs installed once per session."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import Resource
from batteryop.testing.controlplane import ControlPlane, ensure_service_account, request_token

ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")


@pytest.fixture
def admin_config(controlplane: ControlPlane) -> KubeConfig:
    """The admin (system:masters) credentials, read from a kubeconfig dict."""
    return KubeConfig.from_dict(controlplane.kubeconfig())


@pytest.fixture
async def kube(admin_config: KubeConfig) -> AsyncIterator[KubeClient]:
    async with KubeClient(admin_config) as client:
        yield client


ServiceAccountConfig = Callable[[str, str], KubeConfig]


@pytest.fixture
def sa_config(
    controlplane: ControlPlane, kube_admin: k8s.ApiClient, tmp_path: Path
) -> ServiceAccountConfig:
    """A factory: (namespace, name) -> the credentials of that ServiceAccount (created if
    missing), via a kubeconfig file holding a TokenRequest token."""

    def make(namespace: str, name: str) -> KubeConfig:
        ensure_service_account(kube_admin, namespace, name)
        token = request_token(kube_admin, namespace, name)
        path = controlplane.write_kubeconfig(
            tmp_path / f"{name}-{uuid.uuid4().hex[:6]}", token=token
        )
        return KubeConfig.from_kubeconfig(str(path))

    return make


async def grant(
    kube: KubeClient,
    namespace: str,
    service_account: str,
    rules: list[dict[str, list[str]]],
) -> None:
    """Give the ServiceAccount `rules` in `namespace` through a Role and RoleBinding."""
    name = f"{service_account}-{uuid.uuid4().hex[:6]}"
    await kube.create(ROLES, {"metadata": {"name": name}, "rules": rules}, namespace)
    await kube.create(
        ROLEBINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": ROLES.group, "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
            ],
        },
        namespace,
    )
