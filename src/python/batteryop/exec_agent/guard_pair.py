"""The drain guard's pair on the API server (EA-041): the PodDisruptionBudget and the Pod that
hold a drain of one Node, their shape (`guard_objects`) and the three writes the agent's Role
allows (read, create, delete). `drain_guard.DrainGuard` decides when; this module only does.

Create is the budget first, then the Pod, so the Pod is never without it; delete is the Pod
first. AlreadyExists on create and NotFound on delete are what was wanted.
"""

from __future__ import annotations

import contextlib
from typing import Any

from batteryop.api import drain_guard as shape
from batteryop.api import names
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import ConflictError, NotFoundError
from batteryop.kube.resources import NODES, POD_DISRUPTION_BUDGETS, PODS

Object = dict[str, Any]


class GuardBusyError(RuntimeError):
    """The guard Pod's name is taken by a Pod that is being deleted; try again later."""


def guard_labels(node: str) -> dict[str, str]:
    """The labels of the guard Pod and budget; the budget selects the Pod by the first."""
    return {names.DRAIN_GUARD_LABEL: node, names.MANAGED_BY_LABEL: names.MANAGED_BY}


def guard_objects(*, node: str, node_uid: str, namespace: str, image: str) -> tuple[Object, Object]:
    """The PodDisruptionBudget and the Pod of the guard of `node` (EA-041), in create order."""
    name = names.drain_guard_name(node)
    owner = {
        "apiVersion": NODES.api_version,
        "kind": "Node",
        "name": node,
        "uid": node_uid,
        "controller": True,
    }
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": guard_labels(node),
        "ownerReferences": [owner],
    }
    budget: Object = {
        "apiVersion": POD_DISRUPTION_BUDGETS.api_version,
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": {names.DRAIN_GUARD_LABEL: node}},
        },
    }
    pod: Object = {
        "apiVersion": PODS.api_version,
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,  # EA-041: bound to this Host's Node, never scheduled elsewhere
            "automountServiceAccountToken": False,  # no token (EA-051's policy checks it)
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            # EA-110: nothing the policy refuses. Every field below is one it checks.
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": shape.USER,
                "runAsGroup": shape.USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": shape.CONTAINER,
                    "image": image,
                    "resources": {"requests": dict(shape.REQUESTS), "limits": dict(shape.LIMITS)},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    return budget, pod


class GuardPair:
    """The guard of `node` in `namespace` (both objects named `names.drain_guard_name(node)`)."""

    def __init__(self, kube: KubeClient, *, node_name: str, namespace: str, image: str) -> None:
        self._kube = kube
        self.node_name = node_name
        self.namespace = namespace
        self.name = names.drain_guard_name(node_name)
        self._image = image

    async def present(self) -> bool:
        """Whether the guard Pod is there and not being deleted."""
        try:
            pod = await self._kube.get(PODS, self.name, self.namespace)
        except NotFoundError:
            return False
        return not (pod.get("metadata") or {}).get("deletionTimestamp")

    async def create(self, node: Object) -> None:
        """Create the budget, then the Pod, owned by `node`; GuardBusyError while an old guard
        Pod is still going away."""
        budget, pod = guard_objects(
            node=self.node_name,
            node_uid=str(node["metadata"]["uid"]),
            namespace=self.namespace,
            image=self._image,
        )
        for res, body in ((POD_DISRUPTION_BUDGETS, budget), (PODS, pod)):  # the budget first
            try:
                await self._kube.create(res, body, self.namespace)
            except ConflictError as e:
                if not e.already_exists:
                    raise
        if not await self.present():  # an old guard Pod still going away
            raise GuardBusyError(f"Pod {self.namespace}/{self.name} is being deleted")

    async def delete(self) -> None:
        """Delete the Pod, then the budget: the Pod is never without its budget."""
        for res in (PODS, POD_DISRUPTION_BUDGETS):
            with contextlib.suppress(NotFoundError):
                await self._kube.delete(res, self.name, self.namespace)
