"""The fake battery's database file: what survives a restart of its process (BA-060, `-db`).

poolmgrd keeps its Pools, VMs, Leases, event outbox and Host rows in SQLite, the file `-db`
names. The fake keeps the same state in one file of its own format, replaced whole and atomically
after each change (temporary file, fsync, rename; `Store.commit` says when). Host connections
are not stored: Hosts come from the config; only their rows (address, TLS, cordon state) are,
as poolmgrd's `hosts` table keeps them. Placements are not stored: poolmgrd clears them at start.

Format, version 1 (`FORMAT_VERSION`):

    batteryop-fake-battery-db 1
    {"next_event_id": 8, "pools": [...], "vms": [...], "leases": [...], "hosts": [...]}
    {"id": "1", "pool_namespace": "ns", ...}      one line per outbox event, in id order

Pools, Hosts and events are protobuf messages in protobuf's JSON mapping (`PoolSpec`, `Host`,
`Event`), as poolmgrd stores its templates as protojson; VM and Lease rows are JSON objects with
their timestamps in Unix nanoseconds, poolmgrd's column encoding. A file whose first line is not
this header, or names another version, is refused with a `DatabaseError` naming the path: there
are no migrations (TD-005).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf import json_format

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.hosts import HostConnection
from batteryop.testing.fake_battery.store import LeaseRow, Phase, PoolKey, VmRow

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.store import Store

MAGIC = "batteryop-fake-battery-db"
FORMAT_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
R = TypeVar("R")


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


def _ns(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _time(value: object, what: str) -> datetime:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an integer of Unix nanoseconds")
    return _EPOCH + timedelta(microseconds=value // 1000)


def _str(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def _msg(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


Cached = dict[str, tuple[tuple[Any, ...], str]]


def _encoded(
    cache: Cached,
    rows: Iterable[tuple[str, R]],
    changing: Callable[[R], tuple[Any, ...]],
    encode: Callable[[R], dict[str, Any]],
) -> Cached:
    """Each row's JSON, in order: the cached text while its changing fields are the same."""
    out: Cached = {}
    for ident, row in rows:
        fields = changing(row)
        old = cache.get(ident)
        out[ident] = old if old is not None and old[0] == fields else (fields, _dumps(encode(row)))
    return out


def _vm_json(vm: VmRow) -> dict[str, Any]:
    return {
        "uid": vm.uid,
        "flintlock_id": vm.flintlock_id,
        "pool_namespace": vm.pool[0],
        "pool_name": vm.pool[1],
        "host": vm.host,
        "phase": Phase.Name(vm.phase),
        "lease_id": vm.lease_id,
        "created_at": _ns(vm.created_at),
        "updated_at": _ns(vm.updated_at),
    }


def _vm_row(row: dict[str, Any]) -> VmRow:
    lease_id = row["lease_id"]
    if lease_id is not None and not isinstance(lease_id, str):
        raise ValueError("lease_id must be a string or null")
    return VmRow(
        uid=_str(row, "uid"),
        flintlock_id=_str(row, "flintlock_id"),
        pool=(_str(row, "pool_namespace"), _str(row, "pool_name")),
        host=_str(row, "host"),
        phase=Phase.Value(_str(row, "phase")),
        lease_id=lease_id,
        created_at=_time(row["created_at"], "created_at"),
        updated_at=_time(row["updated_at"], "updated_at"),
    )


def _lease_json(lease: LeaseRow) -> dict[str, Any]:
    return {
        "lease_id": lease.lease_id,
        "vm_uid": lease.vm_uid,
        "pool_namespace": lease.pool[0],
        "pool_name": lease.pool[1],
        "claimed_at": _ns(lease.claimed_at),
        "last_heartbeat_at": _ns(lease.last_heartbeat_at),
        "expires_at": _ns(lease.expires_at),
        "request_id": lease.request_id,
    }


def _lease_row(row: dict[str, Any]) -> LeaseRow:
    return LeaseRow(
        lease_id=_str(row, "lease_id"),
        vm_uid=_str(row, "vm_uid"),
        pool=(_str(row, "pool_namespace"), _str(row, "pool_name")),
        claimed_at=_time(row["claimed_at"], "claimed_at"),
        last_heartbeat_at=_time(row["last_heartbeat_at"], "last_heartbeat_at"),
        expires_at=_time(row["expires_at"], "expires_at"),
        request_id=_str(row, "request_id"),
    )


def host_row(conn: HostConnection) -> types_pb2.Host:
    """A Host connection's row as poolmgrd's `hosts` table keeps it (no connection, no version)."""
    tls = conn.config.tls
    host = types_pb2.Host(
        name=conn.name,
        address=conn.address,
        cordoned=conn.cordoned,
        cordoned_reason=conn.cordoned_reason,
        tls=types_pb2.HostTLS(
            insecure=tls.insecure,
            ca_file=tls.ca_file,
            cert_file=tls.cert_file,
            key_file=tls.key_file,
        ),
    )
    host.updated_at.FromDatetime(conn.updated_at)
    if conn.cordoned_at is not None:
        host.cordoned_at.FromDatetime(conn.cordoned_at)
    return host


class Database:
    """One database file: `load()` it at start, `save(store)` after changes."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        # Outbox events never change once recorded: each is encoded once (the outbox is never
        # pruned, so re-encoding it on every write would grow without bound).
        self._events: list[types_pb2.Event] | None = None
        self._event_lines: list[str] = []
        # Pool specs are replaced, never changed in place: one encoding per spec object.
        self._pools: dict[PoolKey, tuple[types_pb2.PoolSpec, str]] = {}
        # Rows are encoded again only when a field that changes has changed (a VM's phase, Lease
        # and update time; a Lease's heartbeat and expiry; a Host's row): most writes change
        # one or two rows of hundreds.
        self._vms: Cached = {}
        self._leases: Cached = {}
        self._hosts: Cached = {}

    def encode(self, store: Store) -> bytes:
        """The file's bytes for the store's durable state."""
        if store.events is not self._events or len(self._event_lines) > len(store.events):
            self._events = store.events
            self._event_lines = []
        for event in store.events[len(self._event_lines) :]:
            self._event_lines.append(_dumps(_msg(event)))
        old_pools, self._pools = self._pools, {}
        pool_rows = []
        for key, spec in store.pools.items():
            cached = old_pools.get(key)
            if cached is None or cached[0] is not spec:
                cached = (spec, _dumps(_msg(spec)))
            self._pools[key] = cached
            pool_rows.append(cached[1])
        vms = _encoded(
            self._vms,
            store.vms.items(),
            lambda vm: (vm.phase, vm.lease_id, vm.updated_at, vm.host, vm.pool),
            _vm_json,
        )
        leases = _encoded(
            self._leases,
            store.leases.items(),
            lambda lease: (lease.last_heartbeat_at, lease.expires_at, lease.vm_uid),
            _lease_json,
        )
        hosts = _encoded(
            self._hosts,
            store.hosts.items(),
            lambda c: (c.config, c.cordoned, c.cordoned_reason, c.cordoned_at, c.updated_at),
            lambda c: _msg(host_row(c)),
        )
        self._vms, self._leases, self._hosts = vms, leases, hosts
        state = (
            f'{{"next_event_id":{int(store.next_event_id)},'
            f'"pools":[{",".join(pool_rows)}],'
            f'"vms":[{",".join(text for _, text in vms.values())}],'
            f'"leases":[{",".join(text for _, text in leases.values())}],'
            f'"hosts":[{",".join(text for _, text in hosts.values())}]}}'
        )
        lines = [f"{MAGIC} {FORMAT_VERSION}", state]
        lines += self._event_lines
        return ("\n".join(lines) + "\n").encode()

    def decode(self, data: bytes) -> Snapshot:
        """The state in data; DatabaseError (naming the path) when it is not a version-1 file."""
        head, _, rest = data.partition(b"\n")
        magic, _, version = head.decode(errors="replace").partition(" ")
        if magic != MAGIC:
            raise DatabaseError(
                self.path, f"not a fake battery database (its first line is {head[:40]!r})"
            )
        if version != str(FORMAT_VERSION):
            raise DatabaseError(
                self.path,
                f"format version {version!r}, this fake battery reads version {FORMAT_VERSION} "
                "only (no migrations)",
            )
        try:
            text = rest.decode()
            state_line, *event_lines = text.splitlines()
            state = json.loads(state_line)
            snapshot = Snapshot(next_event_id=int(state["next_event_id"]))
            for raw in state["pools"]:
                spec = json_format.ParseDict(raw, types_pb2.PoolSpec())
                snapshot.pools[(spec.namespace, spec.name)] = spec
            for raw in state["vms"]:
                vm = _vm_row(raw)
                snapshot.vms[vm.uid] = vm
            for raw in state["leases"]:
                lease = _lease_row(raw)
                snapshot.leases[lease.lease_id] = lease
            for raw in state["hosts"]:
                host = json_format.ParseDict(raw, types_pb2.Host())
                snapshot.hosts[host.name] = host
            for line in event_lines:
                snapshot.events.append(json_format.Parse(line, types_pb2.Event()))
        except (ValueError, KeyError, TypeError, json_format.ParseError) as err:
            # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
            raise DatabaseError(self.path, f"corrupt: {type(err).__name__}: {err}") from err
        if snapshot.events and snapshot.events[-1].id >= snapshot.next_event_id:
            raise DatabaseError(self.path, "corrupt: next_event_id is not above the last event's")
        return snapshot

    def load(self) -> Snapshot | None:
        """The stored state, or None when there is no file yet (a fresh database)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise DatabaseError(self.path, err.strerror or str(err)) from err
        snapshot = self.decode(data)
        self._events = None
        self._pools, self._vms, self._leases, self._hosts = {}, {}, {}, {}
        return snapshot

    def save(self, store: Store) -> None:
        """Replace the file with the store's durable state, atomically and durably.

        As `batteryop.tls.write_atomic` does (temporary file in the same folder, fsync, rename),
        written out here because importing `batteryop.tls` would put `cryptography` into the
        fake battery's pex for ten lines."""
        self._replace(self.encode(store))

    def _replace(self, data: bytes) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise DatabaseError(self.path, f"write: {err.strerror or err}") from err

    def forget_hosts(self) -> None:
        """Empty the file's Host rows and keep the rest (Pools, VMs, Leases, events): a battery
        that lost its `hosts` table, for tests of what puts the Hosts back (TD-006). Run it
        while no fake battery uses the file; DatabaseError for a file it cannot read."""
        try:
            data = self.path.read_bytes()
        except OSError as err:
            raise DatabaseError(self.path, err.strerror or str(err)) from err
        self.decode(data)  # a version-1 file, or DatabaseError
        head, state_line, rest = data.decode().split("\n", 2)
        state = json.loads(state_line)
        state["hosts"] = []
        self._replace("\n".join([head, _dumps(state), rest]).encode())
