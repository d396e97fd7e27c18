from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from batteryop.api.conditions import EventReason, EventType
from batteryop.battery.models import Event, PoolRef
from batteryop.battery.models import EventType as BatteryEventType
from batteryop.kube.outcome import EventRecord
from batteryop.operator.pools.hook_events import hook_failed_event

REF = PoolRef(namespace="ci", name="runners")


def event(type: BatteryEventType, payload: str = "", vm_uid: str = "01HVM") -> Event:
    return Event(7, type, REF, vm_uid, datetime(2026, 1, 1, tzinfo=UTC), payload)


@pytest.mark.req("PO-041")
def test_a_hook_failure_is_a_warning_naming_the_microvm() -> None:
    assert hook_failed_event(event(BatteryEventType.VM_HOOK_FAILED)) == EventRecord(
        EventType.WARNING, EventReason.HOOK_FAILED, "A hook failed on MicroVM 01HVM"
    )


@pytest.mark.req("PO-041")
def test_the_hook_and_error_of_the_payload_are_named() -> None:
    payload = json.dumps({"hook": "create", "error": "exit status 1", "extra": 3})
    record = hook_failed_event(event(BatteryEventType.VM_HOOK_FAILED, payload))
    assert record is not None
    assert record.message == "A hook failed on MicroVM 01HVM (hook create): exit status 1"


@pytest.mark.parametrize("payload", ["not json", "[1, 2]", '{"hook": 3, "error": null}', "  "])
def test_a_payload_without_hook_or_error_strings_is_ignored(payload: str) -> None:
    record = hook_failed_event(event(BatteryEventType.VM_HOOK_FAILED, payload))
    assert record is not None
    assert record.message == "A hook failed on MicroVM 01HVM"


@pytest.mark.parametrize(
    "type", [t for t in BatteryEventType if t is not BatteryEventType.VM_HOOK_FAILED]
)
def test_other_events_record_nothing(type: BatteryEventType) -> None:
    assert hook_failed_event(event(type)) is None
