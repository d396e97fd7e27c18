"""Attack: a Pool author writes lease terms and sizes that turn battery and every Holder against
themselves (issue 43, Medium).

Anyone allowed to create a Pool reaches battery with its spec. Before PO-103..PO-106 the Pool
schema accepted a heartbeat interval of 1ns (every Holder's client renews in a tight loop), a
heartbeat interval no shorter than the expiry threshold (every Lease expires between two
renewals), a size up to 2^31-1 (battery starts one provision per missing MicroVM) and a
10,000-character image reference (stored, then sent to battery and flintlock). Driven here as a
ServiceAccount whose only grant is creating Pools in its namespace, against the real API server
with the CRDs install.yaml ships: each is refused with a message naming the field and the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import names, samples
from batteryop.testing.controlplane import await_access

AUTHOR = "pool-author"


@pytest.fixture
def author(
    crds: list[str],
    kube_admin: k8s.ApiClient,
    namespace: str,
    sa_client: Callable[[str, str], k8s.ApiClient],
) -> k8s.CustomObjectsApi:
    """A ServiceAccount that may create Pools in `namespace`, and nothing else."""
    rule = {"apiGroups": [names.GROUP], "resources": [names.POOL_PLURAL], "verbs": ["create"]}
    authz = k8s.RbacAuthorizationV1Api(kube_admin)
    authz.create_namespaced_role(namespace, {"metadata": {"name": AUTHOR}, "rules": [rule]})
    authz.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": AUTHOR},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUTHOR},
            "subjects": [{"kind": "ServiceAccount", "name": AUTHOR, "namespace": namespace}],
        },
    )
    await_access(
        kube_admin,
        user=f"system:serviceaccount:{namespace}:{AUTHOR}",
        groups=[],
        namespace=namespace,
        verb="create",
        group=names.GROUP,
        resource=names.POOL_PLURAL,
    )
    return k8s.CustomObjectsApi(sa_client(namespace, AUTHOR))


def _lease(heartbeat: str, expiry: str) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["lease"] = {"heartbeatInterval": heartbeat, "expiryThreshold": expiry}

    return change


def _image(spec: dict[str, Any]) -> None:
    spec["template"]["kernel"]["image"] = "ghcr.io/" + "a" * 10_000 + ":1"


def _size(spec: dict[str, Any]) -> None:
    spec["size"] = 2**31 - 1


HOSTILE = [
    pytest.param(
        _lease("1ns", "30s"),
        "spec.lease.heartbeatInterval must be a duration of at least 1s",
        marks=pytest.mark.req("PO-104"),
        id="heartbeat-1ns",
    ),
    pytest.param(
        _lease("1m", "30s"),
        "spec.lease.heartbeatInterval must be shorter than spec.lease.expiryThreshold",
        marks=pytest.mark.req("PO-103"),
        id="heartbeat-longer-than-expiry",
    ),
    pytest.param(
        _image,
        "spec.template.kernel.image: Too long: may not be",
        marks=pytest.mark.req("PO-106"),
        id="image-10000-characters",
    ),
    pytest.param(
        _size,
        "spec.size: Invalid value: 2147483647: spec.size in body should be less than or equal "
        "to 10000",
        marks=pytest.mark.req("PO-105"),
        id="size-2^31-1",
    ),
]


@pytest.mark.controlplane
@pytest.mark.parametrize(("hostile", "expected"), HOSTILE)
def test_a_hostile_pool_is_refused_naming_the_field_and_rule(
    author: k8s.CustomObjectsApi,
    namespace: str,
    hostile: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    body = samples.sample_pool(namespace=namespace)
    hostile(body["spec"])
    with pytest.raises(k8s.ApiException) as caught:
        author.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, body
        )
    assert caught.value.status == 422, caught.value.body
    assert expected in str(caught.value.body), caught.value.body


@pytest.mark.controlplane
@pytest.mark.req("PO-103", "PO-104")
def test_the_sample_pool_is_still_accepted_from_the_author(
    author: k8s.CustomObjectsApi, namespace: str
) -> None:
    body = samples.sample_pool(namespace=namespace)
    author.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, body
    )
