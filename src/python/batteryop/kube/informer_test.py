"""list_watch against the real kube-apiserver: a complete list, then events, and it never stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import NotFoundError
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CONFIGMAPS, Resource
from batteryop.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


async def until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.02)


def cm(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"informer-test": "yes"}}}


async def test_a_list_then_every_event_and_a_failing_callback_only_relists(
    controlplane: ControlPlane, namespace: str
) -> None:
    lists: list[list[str]] = []
    events: list[tuple[str, str]] = []
    fail_next = [True]

    def on_list(items: list[dict[str, Any]]) -> None:
        assert not any("managedFields" in i["metadata"] for i in items)
        lists.append(sorted(i["metadata"]["name"] for i in items))

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        assert "managedFields" not in obj["metadata"]  # nothing here reads it
        name = obj["metadata"]["name"]
        if name == "boom" and fail_next[0]:
            fail_next[0] = False
            raise RuntimeError("a callback that raises once")
        events.append((kind, name))

    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        await kube.create(CONFIGMAPS, cm("before"), namespace)
        task = asyncio.create_task(
            list_watch(kube, CONFIGMAPS, namespace=namespace, on_list=on_list, on_event=on_event)
        )
        try:
            await until(lambda: lists == [["before"]], "the first list")
            await kube.create(CONFIGMAPS, cm("after"), namespace)
            await until(lambda: ("ADDED", "after") in events, "the event after the list")
            assert ("ADDED", "before") not in events, "the list's objects come as the list"
            await kube.create(CONFIGMAPS, cm("boom"), namespace)
            # The callback raised: the loop goes on with a fresh list that holds all three.
            await until(lambda: len(lists) == 2, "a second list after the failure")
            assert lists[1] == ["after", "before", "boom"]
            await kube.delete(CONFIGMAPS, "before", namespace)
            await until(lambda: ("DELETED", "before") in events, "the deletion")
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_failed_list_is_told_to_on_error_before_the_retry(
    controlplane: ControlPlane,
) -> None:
    errors: list[Exception] = []
    missing = Resource("example.com", "v1", "nothings")

    def never(*_: Any) -> None:
        raise AssertionError("nothing can be listed")

    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        task = asyncio.create_task(
            list_watch(kube, missing, on_list=never, on_event=never, on_error=errors.append)
        )
        try:
            await until(lambda: bool(errors), "the failure reported")
            assert isinstance(errors[0], NotFoundError)
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _ShortWatches(KubeClient):
    """The real client, with each watch cut to a few seconds and the version it starts from
    recorded: what list_watch asks of it, as the server sees it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_from: list[str | None] = []

    async def watch(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.started_from.append(kwargs.get("resource_version"))
        kwargs["timeout_seconds"] = 4
        async for event in super().watch(*args, **kwargs):
            yield event


async def test_a_quiet_watch_goes_on_from_the_newest_bookmark(
    controlplane: ControlPlane, namespace: str
) -> None:
    """Issue 43: the next watch started from the list's version however old it was."""
    lists: list[int] = []
    kube = _ShortWatches(KubeConfig.from_dict(controlplane.kubeconfig()))
    async with kube:
        await kube.create(CONFIGMAPS, cm("quiet"), namespace)
        task = asyncio.create_task(
            list_watch(
                kube,
                CONFIGMAPS,
                namespace=namespace,
                field_selector="metadata.name=quiet",
                on_list=lambda items: lists.append(len(items)),
                on_event=lambda kind, obj: None,
            )
        )
        try:
            await until(lambda: len(kube.started_from) == 1, "the first watch")
            first = kube.started_from[0]
            assert first is not None
            for i in range(3):  # the store moves on; the watched object does not
                await kube.create(CONFIGMAPS, cm(f"busy-{i}"), namespace)
            await until(lambda: len(kube.started_from) >= 2, "the second watch", timeout=30)
            second = kube.started_from[1]
            assert second is not None and int(second) > int(first), (first, second)
            assert lists == [1], "no list again: the watch went on"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
