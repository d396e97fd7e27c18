"""The fake battery's old database format, read once to migrate it to SQLite (`db.py`).

Until issue 46 the fake kept its state in one file of its own format:

    batteryop-fake-battery-db 1
    {"next_event_id": 8, "pools": [...], "vms": [...], "leases": [...], "hosts": [...]}
    {"id": "1", "pool_namespace": "ns", ...}      one line per outbox event, in id order

Pools, Hosts and events in protobuf's JSON mapping, VM and Lease rows as JSON objects with
Unix-nanosecond times. `db.Database` migrates such a file in place on first open, so a state
folder written by an older fake (an upgrade test's, a developer's local stack) keeps its Pools,
VMs, Leases, outbox and Host rows. Only this reader is kept: nothing writes the format.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.snapshot import DatabaseError, Snapshot
from batteryop.testing.fake_battery.store import LeaseRow, Phase, VmRow

MAGIC = b"batteryop-fake-battery-db"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def is_legacy(data: bytes) -> bool:
    return data.startswith(MAGIC + b" ")


def _time(row: dict[str, Any], name: str) -> datetime:
    value = row[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer of Unix nanoseconds")
    return _EPOCH + timedelta(microseconds=value // 1000)


def _str(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def _pool(row: dict[str, Any]) -> tuple[str, str]:
    return (_str(row, "pool_namespace"), _str(row, "pool_name"))


def read(path: Path, data: bytes) -> Snapshot:
    """The state in an old-format file; DatabaseError (naming path) unless it is version 1."""
    head, _, rest = data.partition(b"\n")
    version = head[len(MAGIC) + 1 :].decode(errors="replace")
    if version != "1":
        raise DatabaseError(path, f"old format version {version!r}; only version 1 migrates")
    try:
        state_line, *event_lines = rest.decode().splitlines()
        state = json.loads(state_line)
        snapshot = Snapshot(next_event_id=int(state["next_event_id"]))
        for raw in state["pools"]:
            spec = json_format.ParseDict(raw, types_pb2.PoolSpec())
            snapshot.pools[(spec.namespace, spec.name)] = spec
        for raw in state["vms"]:
            lease_id = raw["lease_id"]
            if lease_id is not None and not isinstance(lease_id, str):
                raise ValueError("lease_id must be a string or null")
            snapshot.vms[_str(raw, "uid")] = VmRow(
                uid=_str(raw, "uid"),
                flintlock_id=_str(raw, "flintlock_id"),
                pool=_pool(raw),
                host=_str(raw, "host"),
                phase=Phase.Value(_str(raw, "phase")),
                lease_id=lease_id,
                created_at=_time(raw, "created_at"),
                updated_at=_time(raw, "updated_at"),
            )
        for raw in state["leases"]:
            snapshot.leases[_str(raw, "lease_id")] = LeaseRow(
                lease_id=_str(raw, "lease_id"),
                vm_uid=_str(raw, "vm_uid"),
                pool=_pool(raw),
                claimed_at=_time(raw, "claimed_at"),
                last_heartbeat_at=_time(raw, "last_heartbeat_at"),
                expires_at=_time(raw, "expires_at"),
                request_id=_str(raw, "request_id"),
            )
        for raw in state["hosts"]:
            host = json_format.ParseDict(raw, types_pb2.Host())
            snapshot.hosts[host.name] = host
        for line in event_lines:
            snapshot.events.append(json_format.Parse(line, types_pb2.Event()))
    except (ValueError, KeyError, TypeError, json_format.ParseError) as err:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
        raise DatabaseError(path, f"corrupt: {type(err).__name__}: {err}") from err
    if snapshot.events and snapshot.events[-1].id >= snapshot.next_event_id:
        raise DatabaseError(path, "corrupt: next_event_id is not above the last event's")
    return snapshot
