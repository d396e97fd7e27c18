"""The Exec Agent's manifests: what the DaemonSet asks for, and the admission policy enforced by
the real API server against a real token of the agent's ServiceAccount bound to a Pod on a Node
(EA-004, EA-051)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from batteryop.api import names
from batteryop.manifests import exec_agent, render
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    pod_bound_token,
    request_token,
    token_client,
)

IMAGE = "ghcr.io/phoban01/battery-operator:v9.9.9"
NS = names.OPERATOR_NAMESPACE


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
    writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == [names.FLINTLOCKD_CERT_DIR]
    (volume,) = (v for v in pod["volumes"] if v["name"] == writable[0]["name"])
    assert volume["hostPath"]["path"] == names.FLINTLOCKD_CERT_DIR


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
    assert ns_role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [names.CA_BUNDLE_CONFIG_MAP],
            "verbs": ["get", "list", "watch"],
        }
    ]


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


@pytest.fixture(scope="module")
def installed(admin: k8s.ApiClient) -> list[str]:
    """The namespace and the Exec Agent's objects, applied as install.yaml has them; their kinds."""
    dyn = DynamicClient(admin)
    wanted = [render.namespace_object(NS), *exec_agent.objects(NS, render.labels(), IMAGE)]
    for obj in wanted:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dyn.server_side_apply(
            resource, body=obj, field_manager="exec-agent-test", force_conflicts=True
        )
    return [obj["kind"] for obj in wanted]


@pytest.fixture
def nodes(admin: k8s.ApiClient) -> Iterator[tuple[str, str]]:
    """Two fresh Hosts: the agent's own, and another."""
    core = k8s.CoreV1Api(admin)
    made = [f"host-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in made:
        core.create_node(
            k8s.V1Node(
                metadata=k8s.V1ObjectMeta(
                    name=name,
                    labels={names.HOST_LABEL: names.HOST_LABEL_VALUE},
                    annotations={"example.com/kept": "1"},
                )
            )
        )
    yield made[0], made[1]
    for name in made:
        core.delete_node(name)


def agent_on(admin: k8s.ApiClient, controlplane: ControlPlane, node: str) -> k8s.ApiClient:
    """A client acting as the agent's ServiceAccount with a token bound to its Pod on `node`,
    as the kubelet mints it (so the identity names the Node)."""
    return token_client(controlplane, pod_bound_token(admin, NS, names.EXEC_AGENT_NAME, node))


def refusal(call: Callable[[], Any]) -> str:
    """The API server's message for a write it refused (fails the test if it was allowed)."""
    with pytest.raises(k8s.ApiException) as caught:
        call()
    assert caught.value.status in (403, 422), caught.value.body
    return str(caught.value.body)


def patch_node(api: k8s.ApiClient, node: str, body: dict[str, Any], dry_run: bool = False) -> Any:
    return k8s.CoreV1Api(api).patch_node(node, body, dry_run="All" if dry_run else None)


async def policy_active(agent: k8s.ApiClient, node: str, timeout: float = 30) -> None:
    """Wait (bounded) until the API server enforces the policy: it loads policies a moment
    after they are written, and nothing can be watched for that."""
    foreign = {"metadata": {"labels": {"example.com/probe": "x"}}}
    async with asyncio.timeout(timeout):
        while True:
            try:
                patch_node(agent, node, foreign, dry_run=True)
            except k8s.ApiException as e:
                if e.status in (403, 422) and names.EXEC_AGENT_ADMISSION_POLICY in str(e.body):
                    return
                raise
            await asyncio.sleep(0.1)  # polling the API server's state, not synchronising


@pytest.mark.controlplane
@pytest.mark.req("EA-051")
async def test_the_agent_may_change_only_our_annotations_of_its_own_node(
    admin: k8s.ApiClient,
    controlplane: ControlPlane,
    installed: list[str],
    nodes: tuple[str, str],
) -> None:
    own, other = nodes
    agent = agent_on(admin, controlplane, own)
    try:
        await policy_active(agent, own)
        ours = {names.EXEC_AGENT_READY_ANNOTATION: "true"}
        patch_node(agent, own, {"metadata": {"annotations": ours}})
        patch_node(
            agent, own, {"metadata": {"annotations": {names.EXEC_AGENT_READY_ANNOTATION: None}}}
        )

        assert "only change annotations under" in refusal(
            lambda: patch_node(agent, own, {"metadata": {"annotations": {"example.com/x": "1"}}})
        )
        assert "only change annotations under" in refusal(
            lambda: patch_node(
                agent, own, {"metadata": {"annotations": {"example.com/kept": None}}}
            )
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
    finally:
        agent.close()
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
