"""What the stack puts into the API server before its processes start.

- install.yaml (`batteryop.manifests.render`), every object but the workloads: the namespace,
  both CRDs, the finalizer policy, the operator's and the Exec Agent's ServiceAccounts, RBAC and
  admission policies, battery's ConfigMap. The Deployment, DaemonSet and PersistentVolumeClaim
  are left out: there is no kubelet here; the stack's processes stand in for their Pods, each
  acting as the ServiceAccount its Pod would have.
- The CSR approver's identity (its RBAC is not in install.yaml yet: the rules its tests found)
  and the three CA Secrets it reads.
- battery's config in its ConfigMap as this stack's battery reads it: no Host yet (the
  placeholder), its API on the stack's loopback port, its TLS files in the stack's folder.
- One Node per simulated Host, labelled as a Host, with its InternalIP. Nothing here publishes
  the Host set: the host registry does, from the Nodes' Exec Agent reports (IN-001).
- The install namespace's `default` ServiceAccount (the Exec Agents' drain guard Pods run as it).
- The demo namespace and its Holder ServiceAccount.

Identities: TokenRequest tokens of each ServiceAccount, written into kubeconfigs. An Exec
Agent's token is bound to a Pod object of its ServiceAccount on its Node, as the kubelet's
projected token is, so the API server puts the Node's name into its identity (EA-050, EA-051).

Everything is written with server-side apply through our own async client (`batteryop.kube`),
so a second apply changes nothing; the `kubernetes` package is not used here: importing its
API classes alone takes ten seconds or more on a loaded machine.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from batteryop.api import names
from batteryop.csr_approver.config import ApproverConfig
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import (
    CONFIGMAPS,
    NODES,
    PODS,
    SERVICEACCOUNTS,
    Resource,
)
from batteryop.manifests import cert_manager, rbac, render
from batteryop.testing.controlplane.server import ControlPlane
from batteryop.testing.csr_approver_env import APPROVER_CLUSTER_RULES, approver_namespace_rules
from batteryop.tls import CertificateAuthority

NAMESPACE = names.OPERATOR_NAMESPACE
DEMO_NAMESPACE = "demo"
DEMO_HOLDER = "sandbox"
"""The ServiceAccount that holds the demo's claims and may exec in them."""
LOCAL_IMAGE = "devstack.invalid/battery-operator:local"
"""install.yaml is rendered with this image; its workloads are not applied (see above)."""
WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "PersistentVolumeClaim"})
TOKEN_SECONDS = 24 * 3600
"""Tokens of the stack's processes: a working day (the stack is for a session, not forever)."""
FIELD_MANAGER = "devstack"
HOST_NODE_LABELS: Final[Mapping[str, str]] = {
    names.HOST_LABEL: names.HOST_LABEL_VALUE,
    "kubernetes.io/arch": "amd64",
}
CRD_TIMEOUT_SECONDS = 30.0
BATTERY_CONFIG_KEY: Final = render.CONFIG_KEY
"""battery's config file in its ConfigMap (the key is the file's name in the mount)."""

Obj = dict[str, Any]

_PLURALS: Final[Mapping[str, tuple[str, bool]]] = {
    "Namespace": ("namespaces", False),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "MutatingAdmissionPolicy": ("mutatingadmissionpolicies", False),
    "MutatingAdmissionPolicyBinding": ("mutatingadmissionpolicybindings", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Node": ("nodes", False),
    "ServiceAccount": ("serviceaccounts", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    names.POOL_KIND: (names.POOL_PLURAL, True),
    names.CLAIM_KIND: (names.CLAIM_PLURAL, True),
}
"""Kind -> (plural, namespaced) of every kind the stack writes."""


def resource_of(obj: Mapping[str, Any]) -> Resource:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    plural, namespaced = _PLURALS[str(obj["kind"])]
    return Resource(group, version, plural, namespaced=namespaced)


async def apply(kube: KubeClient, obj: Mapping[str, Any]) -> Obj:
    """Server-side apply of one object (created, or left as it is when it already matches)."""
    res = resource_of(obj)
    meta = obj["metadata"]
    return await kube.patch(
        res,
        str(meta["name"]),
        obj,
        meta.get("namespace") if res.namespaced else None,
        type="apply",
        field_manager=FIELD_MANAGER,
        force=True,
    )


def install_objects() -> list[Obj]:
    """install.yaml's objects in apply order, without its workloads and without the
    cert-manager Issuers and Certificates: no cert-manager runs in the stack, which writes the
    CA Secrets and battery's client certificate itself (`tls_secret`)."""
    return [
        o
        for o in render.render(operator_image=LOCAL_IMAGE, namespace=NAMESPACE)
        if o["kind"] not in WORKLOAD_KINDS and o["apiVersion"] != cert_manager.API_VERSION
    ]


def tls_secret(name: str, ca: CertificateAuthority) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(ca.cert_pem).decode(),
            "tls.key": base64.b64encode(ca.pair.key_pem).decode(),
        },
    }


def approver_objects(config: ApproverConfig) -> list[Obj]:
    """The CSR approver's identity: its rules as its tests found them (not in install.yaml yet)."""
    name = names.CSR_APPROVER_NAME
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    meta = {"name": name, "labels": dict(render.COMMON_LABELS)}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**meta, "namespace": NAMESPACE},
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": APPROVER_CLUSTER_RULES,
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": subject,
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "Role",
            "metadata": {**meta, "namespace": NAMESPACE},
            "rules": approver_namespace_rules(config),
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "RoleBinding",
            "metadata": {**meta, "namespace": NAMESPACE},
            "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "Role", "name": name},
            "subjects": subject,
        },
    ]


def node_object(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(HOST_NODE_LABELS)},
    }


async def wait_established(kube: KubeClient, crd: Mapping[str, Any]) -> None:
    """Until the CRD is Established and its resource answers a list."""
    name = str(crd["metadata"]["name"])
    spec = crd["spec"]
    served = Resource(spec["group"], spec["versions"][0]["name"], spec["names"]["plural"])
    res = resource_of(crd)
    deadline = time.monotonic() + CRD_TIMEOUT_SECONDS
    while True:
        body = await kube.get(res, name)
        conditions = (body.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            try:
                await kube.list(served, NAMESPACE)
                return
            except NotFoundError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not Established within {CRD_TIMEOUT_SECONDS:.0f}s")
        await asyncio.sleep(0.1)


async def install(
    kube: KubeClient,
    *,
    hosts: Mapping[str, str],
    serving_ca: CertificateAuthority,
    client_ca: CertificateAuthority,
    exec_serving_ca: CertificateAuthority,
    approver: ApproverConfig,
    battery_config: str,
) -> None:
    """Everything of the module docstring, idempotently; `battery_config` is the text of
    battery's config file (`batteryop.battery.configfile.render_text`)."""
    crds = []
    for obj in install_objects():
        await apply(kube, obj)
        if obj["kind"] == "CustomResourceDefinition":
            crds.append(obj)
    for obj in [
        *approver_objects(approver),
        tls_secret(names.SERVING_CA_SECRET, serving_ca),
        tls_secret(names.CLIENT_CA_SECRET, client_ca),
        tls_secret(names.EXEC_AGENT_SERVING_CA_SECRET, exec_serving_ca),  # CT-101
        # kube-controller-manager's work, and none runs here: the Exec Agents' drain guard
        # Pods run as the install namespace's `default` ServiceAccount.
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": NAMESPACE},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEMO_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEMO_HOLDER, "namespace": DEMO_NAMESPACE},
        },
    ]:
        await apply(kube, obj)
    await kube.patch(
        CONFIGMAPS,
        names.BATTERY_CONFIG_MAP,
        {"data": {BATTERY_CONFIG_KEY: battery_config}},
        NAMESPACE,
    )
    for name, address in hosts.items():
        await add_node(kube, name, address)
    await asyncio.gather(*(wait_established(kube, crd) for crd in crds))


async def add_node(kube: KubeClient, name: str, address: str) -> None:
    """A Node labelled as a Host, with `address` as its InternalIP (as the kubelet reports it)."""
    await apply(kube, node_object(name))
    await kube.patch(
        NODES,
        name,
        {"status": {"addresses": [{"type": "InternalIP", "address": address}]}},
        subresource="status",
    )


async def token(
    kube: KubeClient,
    service_account: str,
    *,
    namespace: str = NAMESPACE,
    audiences: Sequence[str] = (),
    bound: Mapping[str, str] | None = None,
    seconds: int = TOKEN_SECONDS,
) -> str:
    """A TokenRequest token of the ServiceAccount (bound to `bound`, an object reference)."""
    spec: Obj = {"audiences": list(audiences), "expirationSeconds": seconds}
    if bound is not None:
        spec["boundObjectRef"] = dict(bound)
    answer = await kube.create(
        SERVICEACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        namespace,
        name=service_account,
        subresource="token",
    )
    return str(answer["status"]["token"])


async def service_account_kubeconfig(
    cp: ControlPlane, kube: KubeClient, service_account: str, path: Path
) -> Path:
    return cp.write_kubeconfig(path, token=await token(kube, service_account))


async def exec_agent_kubeconfig(cp: ControlPlane, kube: KubeClient, node: str, path: Path) -> Path:
    """The agent of `node`: a token bound to a Pod of its ServiceAccount on that Node, as the
    kubelet gets for the DaemonSet's Pod (the Pod is only an object; nothing runs it)."""
    pod = await kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": f"{names.EXEC_AGENT_NAME}-{node}-"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": names.EXEC_AGENT_NAME,
                "automountServiceAccountToken": False,
                "containers": [{"name": "exec-agent", "image": LOCAL_IMAGE}],
            },
        },
        NAMESPACE,
    )
    meta = pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return cp.write_kubeconfig(path, token=await token(kube, names.EXEC_AGENT_NAME, bound=bound))


def operator_service_account() -> str:
    return rbac.OPERATOR_SERVICE_ACCOUNT


def host_names(count: int) -> Sequence[str]:
    return [f"host-{chr(ord('a') + i)}" if i < 26 else f"host-{i}" for i in range(count)]
