"""pytest fixtures for the real control plane; loaded by the root conftest.py.

- `controlplane` (session): one etcd + kube-apiserver per test process, built
  once per pin and started in a few seconds; stopped when the process ends.
- `kube_admin`: an admin (system:masters) `kubernetes.client.ApiClient`.
- `namespace`: a fresh namespace per test.
- `sa_client`: a factory of clients acting as a named ServiceAccount with its
  real RBAC: `sa_client(namespace, "operator")`.
- `crds` (session): Pool and MicroVMClaim installed in the control plane; their CRD names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s

from batteryop.api.crds import all_crds
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    install_crd,
    service_account_client,
)


@pytest.fixture(scope="session")
def controlplane() -> Iterator[ControlPlane]:
    cp = ControlPlane.start()
    print(f"\ncontrol plane ready at {cp.url} in {cp.started_in:.2f}s")
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def kube_admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(kube_admin: k8s.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = k8s.CoreV1Api(kube_admin)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    # Without kube-controller-manager the namespace stays Terminating; that is fine
    # for a throwaway control plane and keeps teardown instant.
    core.delete_namespace(name)


@pytest.fixture
def sa_client(controlplane: ControlPlane) -> Iterator[Callable[[str, str], k8s.ApiClient]]:
    made: list[k8s.ApiClient] = []

    def make(namespace: str, name: str) -> k8s.ApiClient:
        api = service_account_client(controlplane, namespace, name)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


@pytest.fixture(scope="session")
def crds(controlplane: ControlPlane) -> list[str]:
    """Pool and MicroVMClaim served by the control plane; their CRD names."""
    api = admin_client(controlplane)
    try:
        for crd in all_crds():
            install_crd(api, crd)
    finally:
        api.close()
    return [crd["metadata"]["name"] for crd in all_crds()]
