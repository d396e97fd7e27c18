"""The CA bundle ConfigMap (`flintlockd-ca`), followed by a watch of that one object (EA-066).

`CABundle.data` is the ConfigMap's data as last seen; `wait_for` and `changed` wake at its
changes. The agent's Role allows a watch of that named object only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from batteryop.kube.client import KubeClient
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CONFIGMAPS, name_selector


class CABundle:
    """The `flintlockd-ca` ConfigMap's CA certificates, followed by a watch (`run`)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.data: dict[str, str] = {}
        self.version = 0
        """Counts changes of `data`."""
        self._changed = asyncio.Event()
        """Set (and replaced by a fresh one) at each change: waiters wake, none is missed."""

    async def run(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            self._set(items[0] if items else None)

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            self._set(None if kind == "DELETED" else obj)

        await list_watch(
            self._kube,
            CONFIGMAPS,
            namespace=self._namespace,
            field_selector=name_selector(self._name),
            on_list=on_list,
            on_event=on_event,
        )

    def _set(self, obj: Mapping[str, Any] | None) -> None:
        data = {str(k): str(v) for k, v in ((obj or {}).get("data") or {}).items()}
        if data != self.data:
            self.data = data
            self.version += 1
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def wait_for(self, predicate: Callable[[dict[str, str]], bool]) -> None:
        """Return once the bundle satisfies `predicate`."""
        while not predicate(self.data):
            await self._changed.wait()

    async def changed(self, since: int) -> int:
        """Wait until `version` is past `since`; the new version."""
        while self.version <= since:
            await self._changed.wait()
        return self.version
