"""EventRecorder against the real kube-apiserver: Events, series, and failures swallowed."""

from __future__ import annotations

import datetime
import logging
import re
import uuid
from typing import Any

import pytest

from batteryop.api import names
from batteryop.api.clock import FakeClock
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.conftest import ServiceAccountConfig
from batteryop.kube.events import (
    NORMAL,
    QUEUE_LIMIT,
    SENDERS,
    WARNING,
    EventRecorder,
    micro_time,
)
from batteryop.kube.resources import CONFIGMAPS, EVENTS, NODES
from batteryop.testing.controlplane.server import free_port

pytestmark = pytest.mark.controlplane

CONTROLLER = f"{names.GROUP}/test"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder(kube: KubeClient, clock: FakeClock) -> EventRecorder:
    return EventRecorder(kube, controller=CONTROLLER, instance="pod-0", clock=clock)


@pytest.fixture
async def subject(kube: KubeClient, namespace: str) -> dict[str, Any]:
    await kube.create(CONFIGMAPS, {"metadata": {"name": "subject"}}, namespace)
    return await kube.get(CONFIGMAPS, "subject", namespace)


async def events_about(kube: KubeClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    found = await kube.list(EVENTS, meta.get("namespace", "default"))
    return [e for e in found if e["regarding"].get("uid") == meta["uid"]]


async def test_an_event_names_the_object_the_controller_and_the_time(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any], clock: FakeClock
) -> None:
    await recorder.record(subject, NORMAL, "Configured", "wrote the config", action="Configure")

    [event] = await events_about(kube, subject)
    meta = subject["metadata"]
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "subject",
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
    }
    assert event["metadata"]["namespace"] == meta["namespace"]
    assert (event["reportingController"], event["reportingInstance"]) == (CONTROLLER, "pod-0")
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal",
        "Configured",
        "Configure",
    )
    assert event["note"] == "wrote the config"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"])
    assert event["eventTime"] == micro_time(clock.now())
    assert "series" not in event


async def test_repeats_within_ten_minutes_patch_one_series(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any], clock: FakeClock
) -> None:
    for _ in range(3):
        await recorder.record(subject, WARNING, "HookFailed", "hook exited 1", action="Provision")
        clock.advance(datetime.timedelta(minutes=9))
    last = clock.now() - datetime.timedelta(minutes=9)

    [event] = await events_about(kube, subject)
    assert event["series"] == {"count": 3, "lastObservedTime": micro_time(last)}


async def test_another_note_or_a_series_gone_quiet_makes_a_new_event(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any], clock: FakeClock
) -> None:
    await recorder.record(subject, WARNING, "HookFailed", "hook exited 1", action="Provision")
    await recorder.record(subject, WARNING, "HookFailed", "hook exited 2", action="Provision")
    assert len(await events_about(kube, subject)) == 2

    clock.advance(datetime.timedelta(minutes=10, seconds=1))
    await recorder.record(subject, WARNING, "HookFailed", "hook exited 1", action="Provision")
    events = await events_about(kube, subject)
    assert len(events) == 3
    assert all("series" not in e for e in events)


async def test_a_series_whose_event_was_deleted_starts_again(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any]
) -> None:
    await recorder.record(subject, NORMAL, "Configured", "same", action="Configure")
    [first] = await events_about(kube, subject)
    await kube.delete(EVENTS, first["metadata"]["name"], first["metadata"]["namespace"])

    await recorder.record(subject, NORMAL, "Configured", "same", action="Configure")

    [second] = await events_about(kube, subject)
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert "series" not in second


async def test_long_notes_are_cut_to_1024_bytes_on_a_character_boundary(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any]
) -> None:
    await recorder.record(subject, WARNING, "HookFailed", "é" * 600, action="Provision")

    [event] = await events_about(kube, subject)
    assert event["note"] == "é" * 512
    assert len(event["note"].encode()) == 1024


async def test_events_about_cluster_scoped_objects_go_to_the_default_namespace(
    kube: KubeClient, recorder: EventRecorder
) -> None:
    node = await kube.create(NODES, {"metadata": {"name": f"host-{uuid.uuid4().hex[:8]}"}})
    try:
        await recorder.record(node, NORMAL, "Registered", "joined", action="Register")
        [event] = await events_about(kube, node)
        assert event["metadata"]["namespace"] == "default"
        assert event["regarding"]["kind"] == "Node"
        assert "namespace" not in event["regarding"]
    finally:
        await kube.delete(NODES, node["metadata"]["name"])


async def test_failures_are_logged_and_never_raised(
    kube: KubeClient,
    namespace: str,
    subject: dict[str, Any],
    sa_config: ServiceAccountConfig,
    admin_config: KubeConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="batteryop.kube.events")
    # A ServiceAccount with no RBAC at all: 403.
    async with KubeClient(sa_config(namespace, "nobody")) as denied:
        recorder = EventRecorder(denied, controller=CONTROLLER, instance="pod-0")
        await recorder.record(subject, NORMAL, "Configured", "note", action="Configure")
    # No server at all.
    gone = KubeConfig(server=f"http://127.0.0.1:{free_port()}", ca_data=None)
    async with KubeClient(gone) as unreachable:
        recorder = EventRecorder(unreachable, controller=CONTROLLER, instance="pod-0")
        await recorder.record(subject, NORMAL, "Configured", "note", action="Configure")
    # An Event the server refuses (type must be Normal or Warning).
    recorder = EventRecorder(kube, controller=CONTROLLER, instance="pod-0")
    await recorder.record(subject, "Bogus", "Configured", "note", action="Configure")

    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "403 Forbidden" in messages[0]
    assert "ConnectionFailed" in messages[1]
    assert "422 Invalid" in messages[2]
    assert all(m.startswith("Failed to record") for m in messages)
    assert await events_about(kube, subject) == []


async def test_posted_events_go_out_in_order(
    kube: KubeClient, recorder: EventRecorder, subject: dict[str, Any]
) -> None:
    for note in ("first", "second", "first"):
        recorder.post(subject, NORMAL, "Configured", note, action="Configure")  # never waits
    await recorder.drain(timeout=30)
    events = await events_about(kube, subject)
    # The repeat joined the first one's series: the first had been sent before it.
    assert sorted((e["note"], (e.get("series") or {}).get("count")) for e in events) == [
        ("first", 2),
        ("second", None),
    ]


async def test_posted_events_go_out_several_at_once(
    kube: KubeClient,
    recorder: EventRecorder,
    subject: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_flight = most = 0
    create = kube.create

    async def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await create(*args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(kube, "create", counted)
    for i in range(3 * SENDERS):
        recorder.post(subject, NORMAL, "Configured", f"n{i}", action="Configure")
    await recorder.drain(timeout=30)
    assert most == SENDERS
    assert len(await events_about(kube, subject)) == 3 * SENDERS
    assert recorder.sizes() == {"series": 3 * SENDERS, "locks": 0, "queued": 0}


async def test_a_full_queue_drops_events_and_says_so(
    caplog: pytest.LogCaptureFixture, subject: dict[str, Any]
) -> None:
    unreachable = KubeClient(KubeConfig(server=f"http://127.0.0.1:{free_port()}", ca_data=None))
    recorder = EventRecorder(unreachable, controller=CONTROLLER, instance="pod-0")
    try:
        with caplog.at_level(logging.WARNING, logger="batteryop.kube.events"):
            for i in range(QUEUE_LIMIT + 3):
                recorder.post(subject, NORMAL, "Configured", f"n{i}", action="Configure")
            assert recorder.dropped == 3
            assert "Dropped Normal Event Configured" in caplog.text
            await recorder.drain(timeout=60)  # each send fails fast: nothing listens there
    finally:
        await unreachable.aclose()
