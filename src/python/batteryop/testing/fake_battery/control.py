"""The standalone fake battery's HTTP control API (TD-006, TD-108): faults, clock, inspection.

JSON over HTTP on its own loopback port, so a test can steer a fake battery that runs as a
separate process (the sidecar position). Endpoints:

- `GET /state`: Pools (with counts), VMs, Leases, Hosts, event count, sweeps, clock time.
- `GET /events`: the whole outbox.
- `POST /faults` {unavailable, claim_delay, claim_delay_after_commit, heartbeat_refusal,
  create_hook_failures, pre_lease_hook_failures, lost_claim_answers, lost_claim_answer_code}:
  sets the given fields (codes by name, null to clear); `DELETE /faults` clears all.
- `POST /drop-event-streams` {refuse_new}: ends open Subscribe streams with UNAVAILABLE.
- `POST /listening` {listening}: stop or resume listening on the gRPC port.
- `POST /restart`: a restart that keeps the state.
- `POST /advance` {seconds}: move the fake clock (only with `--fake-clock`).
- `POST /sweep`: run one sweep now.

Errors answer 400 (bad request) or 409 (not possible now) with {"error": ...}.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from google.protobuf import json_format

from batteryop.api.clock import FakeClock
from batteryop.testing.fake_battery.battery import BatteryStateError, FakeBattery
from batteryop.testing.faultcodes import status_code

Handler = Callable[[web.Request], Awaitable[web.Response]]

_FAULT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "unavailable": bool,
    "claim_delay": float,
    "claim_delay_after_commit": bool,
    "heartbeat_refusal": lambda v: None if v is None else status_code(str(v)),
    "create_hook_failures": lambda v: None if v is None else int(v),
    "pre_lease_hook_failures": lambda v: None if v is None else int(v),
    "lost_claim_answers": int,
    "lost_claim_answer_code": lambda v: status_code(str(v)),
}


class ControlRequestError(ValueError):
    """A control request the fake battery cannot act on."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path


def _json(payload: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(payload, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except json.JSONDecodeError as err:
        raise ControlRequestError(request.path, f"body is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise ControlRequestError(request.path, "body must be a JSON object")
    return body


def _msg(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def state(battery: FakeBattery) -> dict[str, Any]:
    """A JSON-ready snapshot of the fake battery."""
    store = battery.store
    return {
        "now": battery.clock.now().isoformat(),
        "listening": battery.listening,
        "sweeps": battery.sweeps,
        "pools": [
            {
                "spec": _msg(spec),
                "status": _msg(store.counts(key).status()),
            }
            for key, spec in sorted(store.pools.items())
        ],
        "vms": [_msg(vm) for vm in battery.vm_records()],
        "leases": [_msg(lease) for lease in battery.lease_records()],
        "hosts": [
            {
                "name": host.name,
                "address": host.address,
                "cordoned": host.cordoned,
                "vm_count": store.host_vm_count(host.name),
                "flintlock_version": host.flintlock_version,
            }
            for host in sorted(store.hosts.values(), key=lambda h: h.name)
        ],
        "events": len(store.events),
    }


def make_app(battery: FakeBattery) -> web.Application:
    """The control application for battery."""

    def guarded(handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except (ControlRequestError, ValueError, TypeError) as err:
                return _json({"error": str(err)}, 400)
            except BatteryStateError as err:
                return _json({"error": str(err)}, 409)

        return run

    async def get_state(request: web.Request) -> web.Response:
        return _json(state(battery))

    async def get_events(request: web.Request) -> web.Response:
        return _json({"events": [_msg(e) for e in battery.events()]})

    async def set_faults(request: web.Request) -> web.Response:
        body = await _body(request)
        unknown = sorted(set(body) - set(_FAULT_FIELDS))
        if unknown:
            raise ControlRequestError(request.path, f"unknown fault fields {unknown}")
        for name, value in body.items():
            setattr(battery.faults, name, _FAULT_FIELDS[name](value))
        return _json({"faults": _faults(battery)})

    async def clear_faults(request: web.Request) -> web.Response:
        battery.clear_faults()
        return _json({"faults": _faults(battery)})

    async def drop_streams(request: web.Request) -> web.Response:
        body = await _body(request)
        battery.drop_event_streams(refuse_new=bool(body.get("refuse_new", False)))
        return _json({})

    async def listening(request: web.Request) -> web.Response:
        body = await _body(request)
        if "listening" not in body:
            raise ControlRequestError(request.path, "listening (true or false) is required")
        if body["listening"]:
            await battery.resume_listening()
        else:
            await battery.stop_listening()
        return _json({"listening": battery.listening})

    async def restart(request: web.Request) -> web.Response:
        await battery.restart()
        return _json({"target": battery.target})

    async def advance(request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(battery.clock, FakeClock):
            raise BatteryStateError(battery, "the fake battery does not run on a fake clock")
        seconds = float(body.get("seconds", 0))
        if seconds < 0:
            raise ControlRequestError(request.path, "seconds must not be negative")
        await battery.advance(seconds)
        return _json({"now": battery.clock.now().isoformat()})

    async def sweep(request: web.Request) -> web.Response:
        await battery.sweep()
        return _json({"sweeps": battery.sweeps})

    app = web.Application()
    app.router.add_get("/state", guarded(get_state))
    app.router.add_get("/events", guarded(get_events))
    app.router.add_post("/faults", guarded(set_faults))
    app.router.add_delete("/faults", guarded(clear_faults))
    app.router.add_post("/drop-event-streams", guarded(drop_streams))
    app.router.add_post("/listening", guarded(listening))
    app.router.add_post("/restart", guarded(restart))
    app.router.add_post("/advance", guarded(advance))
    app.router.add_post("/sweep", guarded(sweep))
    return app


def _faults(battery: FakeBattery) -> dict[str, Any]:
    faults = battery.faults
    return {
        "unavailable": faults.unavailable,
        "claim_delay": faults.claim_delay,
        "claim_delay_after_commit": faults.claim_delay_after_commit,
        "heartbeat_refusal": faults.heartbeat_refusal.name if faults.heartbeat_refusal else None,
        "create_hook_failures": faults.create_hook_failures,
        "pre_lease_hook_failures": faults.pre_lease_hook_failures,
        "refuse_event_streams": faults.refuse_event_streams,
        "lost_claim_answers": faults.lost_claim_answers,
        "lost_claim_answer_code": faults.lost_claim_answer_code.name,
    }
