"""What the fake battery's database holds, read back at start (BA-060), and its error.

`Snapshot` is the durable state as `db.Database.load()` (and `db_legacy.read`, the old file
format's reader) returns it; `DatabaseError` is what either raises for a file it cannot read
or write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.store import LeaseRow, PoolKey, VmRow


class DatabaseError(Exception):
    """The database file cannot be read or written; the message names the path."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"database {path}: {detail}")
        self.path = path


@dataclass
class Snapshot:
    """The durable state read back from a database file."""

    pools: dict[PoolKey, types_pb2.PoolSpec] = field(default_factory=dict)
    vms: dict[str, VmRow] = field(default_factory=dict)
    leases: dict[str, LeaseRow] = field(default_factory=dict)
    events: list[types_pb2.Event] = field(default_factory=list)
    next_event_id: int = 1
    hosts: dict[str, types_pb2.Host] = field(default_factory=dict)
