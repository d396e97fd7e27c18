"""battery's VM_HOOK_FAILED as a Kubernetes Event on the Pool (PO-041).

The runtime reads battery's Events stream (deduplicated by event id) and records what
`hook_failed_event` returns on the event's Pool. battery v0.4.0 leaves `payload_json` empty;
when a battery fills it with a JSON object, its `hook` and `error` strings are named too.
"""

from __future__ import annotations

import json
from typing import Any

from batteryop.api.conditions import EventReason, EventType
from batteryop.battery import models as battery
from batteryop.kube.outcome import EventRecord


def _payload(payload_json: str) -> dict[str, Any]:
    if not payload_json.strip():
        return {}
    try:
        payload = json.loads(payload_json)
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def hook_failed_event(event: battery.Event) -> EventRecord | None:
    """A Warning `HookFailed` Event naming the MicroVM, for a VM_HOOK_FAILED; else None."""
    if event.type is not battery.EventType.VM_HOOK_FAILED:
        return None
    payload = _payload(event.payload_json)
    hook, error = payload.get("hook"), payload.get("error")
    message = f"A hook failed on MicroVM {event.vm_uid or '(unknown)'}"
    if isinstance(hook, str) and hook:
        message += f" (hook {hook})"
    if isinstance(error, str) and error:
        message += f": {error}"
    return EventRecord(EventType.WARNING, EventReason.HOOK_FAILED, message)  # PO-041
