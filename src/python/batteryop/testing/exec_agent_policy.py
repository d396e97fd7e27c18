"""The Exec Agent's admission policy (EA-051) on the real API server, as its tests drive it.

- `install_exec_agent(admin)`: install.yaml's namespace and Exec Agent objects (RBAC, the
  admission policy, the DaemonSet: inert here) applied as install.yaml has them, and the
  namespace's `default` ServiceAccount (kube-controller-manager's work: Pods run as it); their
  kinds.
- `hosts(admin, count)`: fresh Nodes labelled as Hosts, deleted when the block ends.
- `agent_on(admin, cp, node)`: a client acting as the agent's ServiceAccount with a token bound
  to its Pod on `node`, as the kubelet mints it (so the identity names the Node).
- `policy_active(agent, node)`: waits (bounded) until the API server enforces the policy.
- `refusal(call)`: the API server's message for a write it refused.
- `real_guard(admin, node)`: the drain guard's budget and Pod as the agent makes them.

Used by `manifests/exec_agent_test.py`, `exec_agent/drain_guard_test.py` and the security suite
(`tests/security/`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final

import pytest
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from batteryop.api import names
from batteryop.exec_agent.guard_pair import guard_objects
from batteryop.manifests import exec_agent, render
from batteryop.testing.controlplane import (
    ControlPlane,
    ensure_service_account,
    pod_bound_token,
    token_client,
)

IMAGE: Final = "ghcr.io/phoban01/battery-operator:v9.9.9"
"""The operator image install.yaml is rendered with here."""
NS: Final = names.OPERATOR_NAMESPACE
FIELD_MANAGER: Final = "exec-agent-policy-test"


def install_exec_agent(admin: k8s.ApiClient) -> list[str]:
    """The namespace and the Exec Agent's objects, server-side applied; their kinds."""
    dyn = DynamicClient(admin)
    wanted = [render.namespace_object(NS), *exec_agent.objects(NS, render.labels(), IMAGE)]
    for obj in wanted:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dyn.server_side_apply(resource, body=obj, field_manager=FIELD_MANAGER, force_conflicts=True)
    ensure_service_account(admin, NS, "default")
    return [obj["kind"] for obj in wanted]


@contextlib.contextmanager
def hosts(admin: k8s.ApiClient, count: int) -> Iterator[list[str]]:
    """`count` fresh Nodes labelled as Hosts (with one annotation not ours), then deleted."""
    core = k8s.CoreV1Api(admin)
    made = [f"host-{uuid.uuid4().hex[:8]}" for _ in range(count)]
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
    try:
        yield made
    finally:
        for name in made:
            with contextlib.suppress(k8s.ApiException):
                core.delete_node(name)


def agent_on(admin: k8s.ApiClient, controlplane: ControlPlane, node: str) -> k8s.ApiClient:
    """A client acting as the agent's ServiceAccount with a token bound to its Pod on `node`."""
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


def real_guard(admin: k8s.ApiClient, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The budget and the Pod the agent makes for `node`'s guard (`guard_objects`, with the
    Node's uid, the image install.yaml gives the agent), in create order."""
    uid = str(k8s.CoreV1Api(admin).read_node(node).metadata.uid)
    return guard_objects(node=node, node_uid=uid, namespace=NS, image=names.DRAIN_GUARD_IMAGE)
