"""`Inputs`: what the host registry hears, and how it queues its one reconcile.

The Nodes and the battery config ConfigMap (by name) come from `informer.list_watch`
(`loops`): a list replaces what the registry knew, each watch event updates it. Changes in
this container's mounts of battery's config and TLS files (inotify, `filewatch`) and the
connection to battery being made again (`loops.follow_connection`, IN-105) come in too.
Every input queues the one key, `KEY`, of a one-worker work queue: one reconcile at a time
over the whole inventory (`inventory.reconcile`). Nothing here calls the API server or
battery: each input updates the `RegistryState` and queues the reconcile.
"""

from __future__ import annotations

from typing import Final

from batteryop.api.clock import Clock
from batteryop.host_registry.inventory.state import RegistryState
from batteryop.kube.client import Object, Objects
from batteryop.kube.resources import NODES
from batteryop.kube.workqueue import WorkQueue

KEY: Final = "inventory"
"""The work queue's one key: the reconcile is of every Node at once."""


class Inputs:
    """Routes every input of the registry into its state and its work queue."""

    def __init__(self, state: RegistryState, queue: WorkQueue[str], clock: Clock) -> None:
        self.state = state
        self.queue = queue
        self._clock = clock

    def changed(self) -> None:
        """Something the reconcile reads changed (a mounted file): reconcile."""
        self.queue.add(KEY)

    def on_nodes_listed(self, items: Objects) -> None:
        self.state.nodes = {}
        for node in items:
            self._keep_node(node)
        self.state.nodes_listed = True
        self.queue.add(KEY)

    def _keep_node(self, node: Object) -> None:
        node.setdefault("apiVersion", NODES.api_version)
        node.setdefault("kind", "Node")  # list items carry neither; Events need both
        self.state.nodes[str(node["metadata"]["name"])] = node

    def on_node(self, kind: str, node: Object) -> None:
        if kind == "DELETED":
            self.state.nodes.pop(str(node["metadata"]["name"]), None)
        elif kind in ("ADDED", "MODIFIED"):
            self._keep_node(node)
        self.queue.add(KEY)

    def on_configmap_listed(self, items: Objects) -> None:
        self.state.configmap = items[0] if items else None
        self.state.configmap_listed = True
        self.queue.add(KEY)

    def on_configmap(self, kind: str, cm: Object) -> None:
        self.state.configmap = None if kind == "DELETED" else cm
        self.queue.add(KEY)

    def request_check(self, trigger: str) -> None:
        """IN-105: read battery's Host list again at the next reconcile, now."""
        self.state.check_trigger = trigger
        self.state.next_check_at = self._clock.monotonic()
        self.queue.add(KEY)


__all__ = ["KEY", "Inputs"]
