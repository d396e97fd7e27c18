"""The Kubernetes resources the deployables read and write, and their URL paths.

A `Resource` is a group, version and plural (the path segment and RBAC resource name), plus
whether its objects live in a namespace. `KubeClient` builds every URL from one, so no path is
spelled out anywhere else. Our own kinds take their group, version and plurals from
`batteryop.api.names`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from batteryop.api import names


@dataclass(frozen=True)
class Resource:
    """One API resource: `group` ("" for the core group), `version`, `plural`, scope."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` of its objects: `v1` for the core group, else `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def api_path(
        self, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object, or of one object's subresource.

        `namespace=None` on a namespaced resource is the collection across all namespaces (for
        a list); naming one object of it needs a namespace. A cluster-scoped resource takes
        no namespace.
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            if namespace:
                prefix += f"/namespaces/{_segment(namespace)}"
            elif name is not None:
                raise ValueError(f"{self.plural} are namespaced: {name!r} needs a namespace")
        elif namespace:
            raise ValueError(f"{self.plural} are cluster-scoped: no namespace ({namespace!r})")
        path = f"{prefix}/{self.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"empty name of {self.plural}")
            path += f"/{_segment(name)}"
        if subresource:
            if name is None:
                raise ValueError(f"subresource {subresource!r} of {self.plural} needs a name")
            path += f"/{_segment(subresource)}"
        return path


def _segment(value: str) -> str:
    # Names are DNS subdomains or path segment names; quoting keeps a stray "/" or "?" in a
    # caller's value from addressing another URL.
    return quote(value, safe=":@")


POOLS = Resource(names.GROUP, names.VERSION, names.POOL_PLURAL)
"""Pools (namespaced)."""
CLAIMS = Resource(names.GROUP, names.VERSION, names.CLAIM_PLURAL)
"""MicroVMClaims (namespaced)."""

NODES = Resource("", "v1", "nodes", namespaced=False)
"""Nodes (core/v1, cluster-scoped)."""
CONFIGMAPS = Resource("", "v1", "configmaps")
"""ConfigMaps (core/v1)."""
SECRETS = Resource("", "v1", "secrets")
"""Secrets (core/v1)."""
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts")
"""ServiceAccounts (core/v1); `token` is the TokenRequest subresource."""
EVENTS = Resource("events.k8s.io", "v1", "events")
"""Events (events.k8s.io/v1), written by `EventRecorder`."""
LEASES = Resource("coordination.k8s.io", "v1", "leases")
"""Leases (coordination.k8s.io/v1)."""

CERTIFICATE_SIGNING_REQUESTS = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", namespaced=False
)
"""CertificateSigningRequests (cluster-scoped); subresources `approval` (Approved and Denied
conditions) and `status` (the certificate, and the Failed condition)."""
PODS = Resource("", "v1", "pods")
"""Pods (core/v1)."""
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets")
"""PodDisruptionBudgets (policy/v1): the Exec Agent's drain guard holds one."""

SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", namespaced=False
)
"""SelfSubjectAccessReviews (create only), behind `KubeClient.self_subject_access_review`."""

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
"""TokenReviews (create only): the Exec Agent authenticates its callers' tokens with them."""
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", namespaced=False
)
"""SelfSubjectReviews (create only): who the API server takes this client for."""


def name_selector(name: str) -> str:
    """The field selector of the one object named `name`: a list or watch of just it, which is
    all a `resourceNames`-bound RBAC rule allows."""
    return f"metadata.name={name}"
