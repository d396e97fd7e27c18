"""A least-privilege consumer of claims, its Holder, and Pools made for client tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from integration.stack import Stack, condition_is, ready, wait_for
from kubernetes import client as k8s

from batteryop.api import names, samples
from batteryop.testing.controlplane import ensure_service_account, request_token

HOLDER = "sandbox"
CONSUMER = "consumer"

CONSUMER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.CLAIM_PLURAL],
        "verbs": ["create", "get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": [names.GROUP], "resources": [names.POOL_PLURAL], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
]


def consumer_kubeconfig(stack: Stack, namespace: str, path: Path) -> Path:
    """A kubeconfig of the consumer ServiceAccount, allowed exactly CONSUMER_RULES."""
    ensure_service_account(stack.api, namespace, CONSUMER)
    ensure_service_account(stack.api, namespace, HOLDER)
    rbac = k8s.RbacAuthorizationV1Api(stack.api)
    rbac.create_namespaced_role(
        namespace, {"metadata": {"name": CONSUMER}, "rules": CONSUMER_RULES}
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": CONSUMER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONSUMER},
            "subjects": [{"kind": "ServiceAccount", "name": CONSUMER, "namespace": namespace}],
        },
    )
    token = request_token(stack.api, namespace, CONSUMER)
    return stack.local.cp.write_kubeconfig(path, token=token)


def create_pool(
    stack: Stack,
    namespace: str,
    *,
    name: str = "demo",
    size: int = 2,
    heartbeat: str = "10s",
    expiry: str = "30s",
) -> None:
    body = samples.demo_pool(name, namespace=namespace)
    body["spec"]["size"] = size
    body["spec"]["lease"] = {"heartbeatInterval": heartbeat, "expiryThreshold": expiry}
    stack.custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, body
    )


async def ready_pool(stack: Stack, namespace: str, *, name: str = "demo", **kwargs: Any) -> None:
    create_pool(stack, namespace, name=name, **kwargs)
    await asyncio.to_thread(
        wait_for, stack, names.POOL_PLURAL, namespace, name, ready, what="Ready=True"
    )


async def gone(stack: Stack, namespace: str, name: str) -> None:
    await asyncio.to_thread(
        wait_for, stack, names.CLAIM_PLURAL, namespace, name, lambda b: b is None, what="gone"
    )


async def host_ready(stack: Stack, namespace: str, name: str) -> None:
    """Until claim `name` says HostReady=True: the operator has seen its Host's Node report.

    A test that just (re)wrote the reports cannot know when the operator's Node watch catches
    up; until then a claim may be Bound with HostReady=False, and the client warns (CC-013)."""
    await asyncio.to_thread(
        wait_for,
        stack,
        names.CLAIM_PLURAL,
        namespace,
        name,
        condition_is("HostReady", status="True"),
        what="HostReady=True",
    )
