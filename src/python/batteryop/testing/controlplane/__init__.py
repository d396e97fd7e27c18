"""The real Kubernetes control plane (kube-apiserver + etcd) for tests and the dev stack."""

from batteryop.testing.controlplane.clients import (
    admin_client,
    await_access,
    ensure_service_account,
    install_crd,
    pod_bound_token,
    request_token,
    service_account_client,
    token_client,
    user_client,
)
from batteryop.testing.controlplane.gobuild import (
    Binaries,
    ControlPlaneBuildError,
    ensure_binaries,
)
from batteryop.testing.controlplane.server import (
    ADMIN_USER,
    SERVICE_ACCOUNT_ISSUER,
    ControlPlane,
    ControlPlaneError,
)

__all__ = [
    "ADMIN_USER",
    "SERVICE_ACCOUNT_ISSUER",
    "Binaries",
    "ControlPlane",
    "ControlPlaneBuildError",
    "ControlPlaneError",
    "admin_client",
    "await_access",
    "ensure_binaries",
    "ensure_service_account",
    "install_crd",
    "pod_bound_token",
    "request_token",
    "service_account_client",
    "token_client",
    "user_client",
]
