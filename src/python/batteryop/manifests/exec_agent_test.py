"""The Exec Agent's manifests: what the DaemonSet asks for, and the admission policy enforced by
the real API server against a real token of the agent's ServiceAccount bound to a Pod on a Node
(EA-004, EA-051)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.manifests import exec_agent, render
from batteryop.testing.controlplane import ControlPlane, admin_client, request_token, token_client
from batteryop.testing.exec_agent_policy import (
    IMAGE,
    NS,
    agent_on,
    hosts,
    install_exec_agent,
    patch_node,
    policy_active,
    real_guard,
    refusal,
)


def daemon_set() -> dict[str, Any]:
    return next(o for o in render.render(operator_image=IMAGE) if o["kind"] == "DaemonSet")


@pytest.mark.req("EA-004")
def test_the_agent_runs_on_every_host_and_only_there() -> None:
    pod = daemon_set()["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {names.HOST_LABEL: names.HOST_LABEL_VALUE}
    assert {t["key"] for t in pod["tolerations"]} == {names.HOST_TAINT_KEY}
    assert "affinity" not in pod


@pytest.mark.req("EA-002")
def test_the_agent_listens_on_the_hosts_address() -> None:
    pod = daemon_set()["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/phoban01/battery-operator/exec-agent:v9.9.9"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["HOST_IP"] == "status.hostIP"
    assert env["NODE_NAME"] == "spec.nodeName"
    assert f"--flintlockd=$(HOST_IP):{names.FLINTLOCKD_PORT}" in container["args"]
    assert {p["containerPort"] for p in container["ports"]} >= {names.EXEC_AGENT_PORT}


@pytest.mark.req("EA-060", "EA-064")
def test_the_agent_gets_certificates_by_csr_and_writes_only_flintlockds_directory() -> None:
    pod = daemon_set()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert f"--trust-domain={names.DEFAULT_TRUST_DOMAIN}" in container["args"]
    assert f"--flintlockd-cert-dir={names.FLINTLOCKD_CERT_DIR}" in container["args"]
    assert not [a for a in container["args"] if a.startswith(("--tls-", "--flintlockd-key"))]
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
    # Of the Host's files it writes only flintlockd's folder; /tmp is an emptyDir of its own
    # (its root filesystem is read-only, and the PEX unpacks there).
    assert {m["mountPath"]: volumes[m["name"]] for m in writable} == {
        names.FLINTLOCKD_CERT_DIR: volumes[writable[0]["name"]],
        "/tmp": {"name": "exec-agent-tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    }
    assert volumes[writable[0]["name"]]["hostPath"]["path"] == names.FLINTLOCKD_CERT_DIR


@pytest.mark.req("EA-067")
def test_the_agent_may_only_create_and_get_csrs_and_read_the_ca_bundle_by_name() -> None:
    objs = render.render(operator_image=IMAGE)
    role = next(
        o
        for o in objs
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == names.EXEC_AGENT_NAME
    )
    csr_rules = [r for r in role["rules"] if "certificatesigningrequests" in r["resources"]]
    assert csr_rules == [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get"],
        }
    ]
    (ns_role,) = (
        o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == names.EXEC_AGENT_NAME
    )
    assert [r for r in ns_role["rules"] if "configmaps" in r["resources"]] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [names.CA_BUNDLE_CONFIG_MAP],
            "verbs": ["get", "list", "watch"],
        }
    ]


@pytest.mark.req("EA-040", "EA-041")
def test_the_agent_may_follow_claims_and_its_node_and_make_and_remove_its_guard() -> None:
    objs = render.render(operator_image=IMAGE)

    def rules(kind: str) -> dict[str, list[str]]:
        (role,) = (
            o for o in objs if o["kind"] == kind and o["metadata"]["name"] == names.EXEC_AGENT_NAME
        )
        return {
            f"{g}/{r}": rule["verbs"]
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            if "resourceNames" not in rule
        }

    cluster = rules("ClusterRole")
    assert cluster[f"{names.GROUP}/{names.CLAIM_PLURAL}"] == ["get", "list", "watch"]
    assert cluster["/nodes"] == ["get", "list", "watch", "patch"]
    namespaced = rules("Role")
    assert namespaced == {
        "/pods": ["get", "create", "delete"],
        "policy/poddisruptionbudgets": ["create", "delete"],
    }
    (container,) = daemon_set()["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert "--guard-namespace=$(POD_NAMESPACE)" in container["args"]
    assert f"--guard-image={names.DRAIN_GUARD_IMAGE}" in container["args"]
    assert "--drain-timeout=1h0m0s" in container["args"]


def test_the_agent_image_sits_beside_the_operator_image() -> None:
    assert exec_agent.exec_agent_image_for("r.io/a/op:v1") == "r.io/a/op/exec-agent:v1"
    assert exec_agent.exec_agent_image_for("localhost:5000/op") == "localhost:5000/op/exec-agent"
    with pytest.raises(ValueError, match="digest"):
        exec_agent.exec_agent_image_for("r.io/op@sha256:" + "0" * 64)


# --- EA-051 on the real API server -------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        yield api
    finally:
        api.close()


EXTRA_ROLE = "exec-agent-test-extra"
"""A grant the Manifests do not give: updates of Pods and budgets, to show the policy refuses
what RBAC would allow."""


@pytest.fixture(scope="module")
def installed(admin: k8s.ApiClient) -> list[str]:
    """The Exec Agent's objects as install.yaml has them (`install_exec_agent`); their kinds.

    Also `EXTRA_ROLE`."""
    kinds = install_exec_agent(admin)
    authz = k8s.RbacAuthorizationV1Api(admin)
    extra = {
        "metadata": {"name": EXTRA_ROLE},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["patch"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["patch"]},
        ],
    }
    binding = {
        "metadata": {"name": EXTRA_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": EXTRA_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": names.EXEC_AGENT_NAME, "namespace": NS}],
    }
    with contextlib.suppress(k8s.ApiException):
        authz.create_namespaced_role(NS, extra)
    with contextlib.suppress(k8s.ApiException):
        authz.create_namespaced_role_binding(NS, binding)
    return kinds


@pytest.fixture
def nodes(admin: k8s.ApiClient) -> Iterator[tuple[str, str]]:
    """Two fresh Hosts: the agent's own, and another."""
    with hosts(admin, 2) as (own, other):
        yield own, other


@pytest.fixture
async def agent(
    admin: k8s.ApiClient, controlplane: ControlPlane, installed: list[str], nodes: tuple[str, str]
) -> AsyncIterator[k8s.ApiClient]:
    """A client as the Exec Agent of the first of `nodes`, once the policy holds for it."""
    own, _ = nodes
    client = agent_on(admin, controlplane, own)
    try:
        await policy_active(client, own)
        yield client
    finally:
        client.close()


@pytest.mark.controlplane
@pytest.mark.req("EA-051")
async def test_the_agent_may_change_only_our_annotations_of_its_own_node(
    admin: k8s.ApiClient, agent: k8s.ApiClient, nodes: tuple[str, str]
) -> None:
    own, other = nodes
    ours = {names.EXEC_AGENT_READY_ANNOTATION: "true"}
    patch_node(agent, own, {"metadata": {"annotations": ours}})
    patch_node(agent, own, {"metadata": {"annotations": {names.EXEC_AGENT_READY_ANNOTATION: None}}})

    assert "only change annotations under" in refusal(
        lambda: patch_node(agent, own, {"metadata": {"annotations": {"example.com/x": "1"}}})
    )
    assert "only change annotations under" in refusal(
        lambda: patch_node(agent, own, {"metadata": {"annotations": {"example.com/kept": None}}})
    )
    assert "labels, owners, finalizers or spec" in refusal(
        lambda: patch_node(agent, own, {"metadata": {"labels": {names.HOST_LABEL: "false"}}})
    )
    assert "labels, owners, finalizers or spec" in refusal(
        lambda: patch_node(agent, own, {"spec": {"unschedulable": True}})
    )
    assert "only change its own Node" in refusal(
        lambda: patch_node(agent, other, {"metadata": {"annotations": ours}})
    )
    node = k8s.CoreV1Api(admin).read_node(own)
    assert node.metadata.labels[names.HOST_LABEL] == names.HOST_LABEL_VALUE
    assert node.metadata.annotations.get("example.com/kept") == "1"
    assert not node.spec.unschedulable


@pytest.mark.controlplane
@pytest.mark.req("EA-051")
async def test_an_agent_identity_naming_no_node_may_change_no_node(
    admin: k8s.ApiClient,
    controlplane: ControlPlane,
    installed: list[str],
    nodes: tuple[str, str],
) -> None:
    own, _ = nodes
    bound = agent_on(admin, controlplane, own)
    try:
        await policy_active(bound, own)
    finally:
        bound.close()
    unbound = token_client(controlplane, request_token(admin, NS, names.EXEC_AGENT_NAME))
    try:
        ours = {"metadata": {"annotations": {names.EXEC_AGENT_READY_ANNOTATION: "true"}}}
        assert "must name exactly one Node" in refusal(lambda: patch_node(unbound, own, ours))
    finally:
        unbound.close()


def guard_pod(admin: k8s.ApiClient, node: str, **spec: Any) -> dict[str, Any]:
    """The Pod the agent makes as the drain guard of `node` (`real_guard`), `spec` overriding."""
    _, pod = real_guard(admin, node)
    pod["spec"].update(spec)
    return pod


def guard_budget(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {names.DRAIN_GUARD_LABEL: node}}},
    }


@pytest.mark.controlplane
@pytest.mark.req("EA-041", "EA-051")
async def test_the_agent_may_only_create_and_delete_its_own_nodes_drain_guard(
    admin: k8s.ApiClient, agent: k8s.ApiClient, nodes: tuple[str, str]
) -> None:
    own, other = nodes
    core, policy = k8s.CoreV1Api(agent), k8s.PolicyV1Api(agent)
    guard = names.drain_guard_name(own)
    # Its own guard: the budget, then the Pod, then both removed.
    policy.create_namespaced_pod_disruption_budget(NS, guard_budget(guard, own))
    core.create_namespaced_pod(NS, guard_pod(admin, own))

    not_its_guard = "only create and delete the drain guard of its own Node"
    assert not_its_guard in refusal(lambda: core.create_namespaced_pod(NS, guard_pod(admin, other)))
    assert not_its_guard in refusal(
        lambda: policy.create_namespaced_pod_disruption_budget(
            NS, guard_budget(names.drain_guard_name(other), other)
        )
    )
    renamed = guard_pod(admin, own)
    renamed["metadata"]["name"] = f"{guard}-2"
    assert not_its_guard in refusal(lambda: core.create_namespaced_pod(NS, renamed))
    assert not_its_guard in refusal(
        lambda: policy.create_namespaced_pod_disruption_budget(NS, guard_budget("pdb", own))
    )
    # Its own guard's name, but bound to another Node, or with a token, or a volume.
    core.delete_namespaced_pod(guard, NS)
    assert "must be bound to its own Node" in refusal(
        lambda: core.create_namespaced_pod(NS, guard_pod(admin, own, nodeName=other))
    )
    assert "must not mount a ServiceAccount token" in refusal(
        lambda: core.create_namespaced_pod(
            NS, guard_pod(admin, own, automountServiceAccountToken=True)
        )
    )
    empty_dir = [{"name": "scratch", "emptyDir": {}}]
    assert "must have no volumes" in refusal(
        lambda: core.create_namespaced_pod(NS, guard_pod(admin, own, volumes=empty_dir))
    )
    # Never changed once made, even where RBAC allows it (EXTRA_ROLE).
    core.create_namespaced_pod(NS, guard_pod(admin, own))
    never_changed = "only create and delete its drain guard, never change it"
    relabel = {"metadata": {"labels": {"example.com/x": "1"}}}
    assert never_changed in refusal(lambda: core.patch_namespaced_pod(guard, NS, relabel))
    assert never_changed in refusal(
        lambda: core.patch_namespaced_pod_status(guard, NS, {"status": {"phase": "Failed"}})
    )
    assert never_changed in refusal(
        lambda: policy.patch_namespaced_pod_disruption_budget(
            guard, NS, {"spec": {"minAvailable": 0}}
        )
    )
    # Nor may it delete a Pod that is not its guard: here, the Pod its own token is bound to.
    (own_pod,) = (
        p.metadata.name
        for p in k8s.CoreV1Api(admin).list_namespaced_pod(NS).items
        if p.spec.node_name == own and p.metadata.name != guard
    )
    assert not_its_guard in refusal(lambda: core.delete_namespaced_pod(own_pod, NS))
    core.delete_namespaced_pod(guard, NS)
    policy.delete_namespaced_pod_disruption_budget(guard, NS)
    admin_core = k8s.CoreV1Api(admin)
    assert [p.metadata.name for p in admin_core.list_namespaced_pod(NS).items].count(guard) == 0
    budgets = k8s.PolicyV1Api(admin).list_namespaced_pod_disruption_budget(NS).items
    assert [b.metadata.name for b in budgets] == []
