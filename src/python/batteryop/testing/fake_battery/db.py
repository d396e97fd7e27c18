"""The fake battery's database: what survives a restart of its process (BA-060, `-db`).

poolmgrd keeps its Pools, VMs, Leases, event outbox and Host rows in SQLite, the file `-db`
names (battery-api.md §6); so does the fake, through Python's `sqlite3`, in tables and columns
named as poolmgrd's: `vms`, `leases`, `events` (`id` an AUTOINCREMENT, the outbox's numbering),
`hosts` (with main's four TLS columns), times in Unix nanoseconds, `phase` and `type` as their
enum numbers, so the read-only query battery-api.md suggests for orphans works on both. One
difference: `pools` keeps each spec whole, as protobuf JSON in `spec`, where poolmgrd spreads it
over columns. Host connections and placements are not stored (poolmgrd clears placements at
start).

As poolmgrd: one connection, WAL journal, `PRAGMA user_version` holding the schema version,
`MIGRATIONS[i]` taking version i to i+1 in one transaction with its bump, and a database newer
than this code refused. Ours only: `PRAGMA application_id` marks the file as the fake's (a
foreign database is refused rather than read), and a file in the fake's old format of its own
(`db_legacy.py`) is migrated in place on first open: a complete new database is written beside
it and renamed over it, so a failed migration leaves the old file.

`save(store)` writes what changed since the last write, in one transaction (`Store.commit`
says when: before any answer that follows a change leaves), with `synchronous=FULL`, so a
committed change survives a killed process and the machine's crash alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf import json_format, timestamp_pb2

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery import db_legacy
from batteryop.testing.fake_battery.hosts import HostConnection
from batteryop.testing.fake_battery.snapshot import DatabaseError, Snapshot
from batteryop.testing.fake_battery.store import LeaseRow, Phase, PoolKey, Store, VmRow

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "Database", "DatabaseError", "Snapshot"]

APPLICATION_ID = 0x62617466  # "batf"
MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the tables.
    """
    CREATE TABLE pools (namespace TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL,
                        PRIMARY KEY (namespace, name));
    CREATE TABLE vms (uid TEXT PRIMARY KEY, flintlock_id TEXT NOT NULL,
                      pool_namespace TEXT NOT NULL, pool_name TEXT NOT NULL,
                      flintlock_host TEXT NOT NULL, phase INTEGER NOT NULL, lease_id TEXT,
                      created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
    CREATE INDEX idx_vms_pool_phase ON vms (pool_namespace, pool_name, phase);
    CREATE TABLE leases (lease_id TEXT PRIMARY KEY, vm_uid TEXT NOT NULL,
                         pool_namespace TEXT NOT NULL, pool_name TEXT NOT NULL,
                         claimed_at INTEGER NOT NULL, last_heartbeat_at INTEGER NOT NULL,
                         expires_at INTEGER NOT NULL, request_id TEXT);
    CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, pool_namespace TEXT NOT NULL,
                         pool_name TEXT NOT NULL, vm_uid TEXT NOT NULL, type INTEGER NOT NULL,
                         created_at INTEGER NOT NULL, payload_json TEXT NOT NULL);
    CREATE TABLE hosts (name TEXT PRIMARY KEY, address TEXT NOT NULL, cordoned INTEGER NOT NULL,
                        cordoned_reason TEXT NOT NULL, cordoned_at INTEGER,
                        updated_at INTEGER NOT NULL, tls_insecure INTEGER NOT NULL,
                        ca_file TEXT NOT NULL, cert_file TEXT NOT NULL, key_file TEXT NOT NULL);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

# Each table's columns, its key columns first (`KEYS` of them).
COLUMNS = {
    "pools": ("namespace", "name", "spec"),
    "vms": (
        "uid",
        "flintlock_id",
        "pool_namespace",
        "pool_name",
        "flintlock_host",
        "phase",
        "lease_id",
        "created_at",
        "updated_at",
    ),
    "leases": (
        "lease_id",
        "vm_uid",
        "pool_namespace",
        "pool_name",
        "claimed_at",
        "last_heartbeat_at",
        "expires_at",
        "request_id",
    ),
    "hosts": (
        "name",
        "address",
        "cordoned",
        "cordoned_reason",
        "cordoned_at",
        "updated_at",
        "tls_insecure",
        "ca_file",
        "cert_file",
        "key_file",
    ),
}
KEYS = {"pools": 2, "vms": 1, "leases": 1, "hosts": 1}
_EVENT_COLUMNS = ("id", "pool_namespace", "pool_name", "vm_uid", "type", "created_at")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Row = tuple[Any, ...]
Rows = dict[str, dict[Row, Row]]
"""Table -> key -> the row's column values."""


def _ns(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _time(value: object) -> datetime:
    if not isinstance(value, int):
        raise ValueError(f"a time must be an integer of Unix nanoseconds, not {value!r}")
    return _EPOCH + timedelta(microseconds=value // 1000)


def _timestamp(value: object) -> timestamp_pb2.Timestamp:
    _time(value)  # ValueError unless an integer
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(value))  # type: ignore[call-overload]
    return ts


def _json(message: Any) -> str:
    return json.dumps(
        json_format.MessageToDict(message, preserving_proto_field_name=True),
        separators=(",", ":"),
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


def _vm_values(vm: VmRow) -> Row:
    times = (_ns(vm.created_at), _ns(vm.updated_at))
    return (vm.uid, vm.flintlock_id, *vm.pool, vm.host, int(vm.phase), vm.lease_id, *times)


def _lease_values(lease: LeaseRow) -> Row:
    times = (_ns(lease.claimed_at), _ns(lease.last_heartbeat_at), _ns(lease.expires_at))
    return (lease.lease_id, lease.vm_uid, *lease.pool, *times, lease.request_id or None)


def _host_values(host: types_pb2.Host) -> Row:
    cordoned_at = host.cordoned_at.ToNanoseconds() if host.HasField("cordoned_at") else None
    tls = host.tls
    cordon = (int(host.cordoned), host.cordoned_reason, cordoned_at)
    files = (tls.ca_file, tls.cert_file, tls.key_file)
    updated = host.updated_at.ToNanoseconds()
    return (host.name, host.address, *cordon, updated, int(tls.insecure), *files)


def _event_values(event: types_pb2.Event) -> Row:
    pool = (event.pool_namespace, event.pool_name)
    created = event.created_at.ToNanoseconds()
    return (event.id, *pool, event.vm_uid, int(event.type), created, event.payload_json)


def _keyed(table: str, rows: Iterator[Row]) -> dict[Row, Row]:
    return {row[: KEYS[table]]: row for row in rows}


def _snapshot_rows(snapshot: Snapshot) -> Rows:
    return {
        "pools": _keyed("pools", ((*k, _json(s)) for k, s in snapshot.pools.items())),
        "vms": _keyed("vms", (_vm_values(vm) for vm in snapshot.vms.values())),
        "leases": _keyed("leases", (_lease_values(x) for x in snapshot.leases.values())),
        "hosts": _keyed("hosts", (_host_values(h) for h in snapshot.hosts.values())),
    }


def _read(conn: sqlite3.Connection) -> tuple[Snapshot, Rows]:
    """The database's state, and its rows as `save` compares them (ValueError: corrupt)."""
    rows: Rows = {
        table: _keyed(table, iter(conn.execute(f"SELECT {', '.join(cols)} FROM {table}")))
        for table, cols in COLUMNS.items()
    }
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    snapshot = Snapshot(next_event_id=(seq[0] if seq else 0) + 1)
    for namespace, name, spec in rows["pools"].values():
        snapshot.pools[(namespace, name)] = json_format.Parse(spec, types_pb2.PoolSpec())
    for uid, fl_id, ns, pool, host, phase, lease_id, created, updated in rows["vms"].values():
        Phase.Name(phase)  # ValueError for a phase poolmgrd does not have
        row = VmRow(uid, fl_id, (ns, pool), host, phase, lease_id, _time(created), _time(updated))
        snapshot.vms[uid] = row
    for lease_id, vm_uid, ns, pool, claimed, beat, expires, request in rows["leases"].values():
        times = (_time(claimed), _time(beat), _time(expires))
        snapshot.leases[lease_id] = LeaseRow(lease_id, vm_uid, (ns, pool), *times, request or "")
    for name, address, cordoned, reason, cordoned_at, updated, *tls in rows["hosts"].values():
        host = types_pb2.Host(name=name, address=address, cordoned=bool(cordoned))
        host.cordoned_reason = reason
        host.updated_at.CopyFrom(_timestamp(updated))
        if cordoned_at is not None:
            host.cordoned_at.CopyFrom(_timestamp(cordoned_at))
        insecure, ca_file, cert_file, key_file = tls
        host.tls.CopyFrom(types_pb2.HostTLS(insecure=bool(insecure), ca_file=ca_file))
        host.tls.cert_file, host.tls.key_file = cert_file, key_file
        snapshot.hosts[name] = host
    query = f"SELECT {', '.join(_EVENT_COLUMNS)} FROM events ORDER BY id"
    for event_id, ns, pool, vm_uid, kind, created in conn.execute(query):
        types_pb2.EventType.Name(kind)
        event = types_pb2.Event(id=event_id, pool_namespace=ns, pool_name=pool, vm_uid=vm_uid)
        event.type = kind
        event.created_at.CopyFrom(_timestamp(created))
        snapshot.events.append(event)
    return snapshot, rows


class Database:
    """One database file: `load()` it at start, `save(store)` after changes, `close()` at exit."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        # What the database holds, as written or read: `save` writes only rows that differ.
        self._written: Rows = {table: {} for table in COLUMNS}
        self._events: list[types_pb2.Event] | None = None
        self._events_written = 0
        self._next_event_id = 1
        # Pool specs are replaced, never changed in place: one encoding per spec object.
        self._specs: dict[PoolKey, tuple[types_pb2.PoolSpec, str]] = {}

    # -- opening: the schema and its migrations -------------------------------------------

    def _connect(self, path: Path) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                self._migrate(conn)
            except BaseException:
                conn.close()
                raise
        except sqlite3.Error as err:
            raise DatabaseError(self.path, f"{type(err).__name__}: {err}") from err
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring conn's schema to SCHEMA_VERSION (DatabaseError for one not ours or newer)."""
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as err:
            raise DatabaseError(self.path, f"not a fake battery database ({err})") from err
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app != APPLICATION_ID and (version or tables):
            raise DatabaseError(self.path, "not a fake battery database (another application's)")
        if version > SCHEMA_VERSION:
            raise DatabaseError(
                self.path,
                f"schema version {version} is newer than this fake battery supports "
                f"({SCHEMA_VERSION})",
            )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        for step in range(version, SCHEMA_VERSION):
            conn.executescript(
                f"BEGIN IMMEDIATE; {MIGRATIONS[step]}; PRAGMA application_id={APPLICATION_ID};"
                f" PRAGMA user_version={step + 1}; COMMIT;"
            )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._migrate_legacy()
            self._conn = self._connect(self.path)
        return self._conn

    def _migrate_legacy(self) -> None:
        """A file in the old format of our own becomes a database of the same state."""
        try:
            with self.path.open("rb") as file:
                if not db_legacy.is_legacy(file.read(64)):
                    return
            snapshot = db_legacy.read(self.path, self.path.read_bytes())
        except FileNotFoundError:
            return
        except OSError as err:
            raise DatabaseError(self.path, err.strerror or str(err)) from err
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.migrating")
        tmp.unlink(missing_ok=True)
        try:
            with contextlib.closing(self._connect(tmp)) as conn:
                with self._transaction(conn):
                    self._write(conn, {}, _snapshot_rows(snapshot), snapshot.events, 0)
                    self._write_sequence(conn, snapshot.next_event_id)
                conn.execute("PRAGMA journal_mode=DELETE")  # one file to rename
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- reading and writing --------------------------------------------------------------

    def load(self) -> Snapshot | None:
        """The stored state, or None when there is no database yet (a fresh one is made)."""
        self.close()
        fresh = not self.path.exists()
        conn = self._connection()
        try:
            snapshot, rows = _read(conn)
        except (sqlite3.Error, ValueError, TypeError, json_format.ParseError) as err:
            self.close()
            raise DatabaseError(self.path, f"corrupt: {type(err).__name__}: {err}") from err
        self._written = rows
        self._events = snapshot.events
        self._events_written = len(snapshot.events)
        self._next_event_id = snapshot.next_event_id
        self._specs = {}
        return None if fresh else snapshot

    def save(self, store: Store) -> None:
        """Write what changed in the store's durable state, in one transaction."""
        rows: Rows = {
            "pools": _keyed("pools", ((*k, self._spec_json(k, s)) for k, s in store.pools.items())),
            "vms": _keyed("vms", (_vm_values(vm) for vm in store.vms.values())),
            "leases": _keyed("leases", (_lease_values(x) for x in store.leases.values())),
            "hosts": _keyed("hosts", (_host_values(host_row(c)) for c in store.hosts.values())),
        }
        self._specs = {key: self._specs[key] for key in store.pools}
        full = store.events is not self._events  # another store than the one last written
        written = 0 if full else self._events_written
        conn = self._connection()
        try:
            with self._transaction(conn):
                if full:
                    for table in COLUMNS:
                        conn.execute(f"DELETE FROM {table}")
                self._write(conn, {} if full else self._written, rows, store.events, written)
                if full or store.next_event_id != self._next_event_id:
                    self._write_sequence(conn, store.next_event_id)
        except sqlite3.Error as err:
            raise DatabaseError(self.path, f"write: {type(err).__name__}: {err}") from err
        self._written = rows
        self._events, self._events_written = store.events, len(store.events)
        self._next_event_id = store.next_event_id

    def _spec_json(self, key: PoolKey, spec: types_pb2.PoolSpec) -> str:
        cached = self._specs.get(key)
        if cached is None or cached[0] is not spec:
            cached = self._specs[key] = (spec, _json(spec))
        return cached[1]

    @staticmethod
    def _write(
        conn: sqlite3.Connection,
        before: Rows,
        rows: Rows,
        events: list[types_pb2.Event],
        written: int,
    ) -> None:
        """Make the tables hold rows where they held before, and the outbox events."""
        for table, current in rows.items():
            old = before.get(table, {})
            keys = COLUMNS[table][: KEYS[table]]
            gone = [key for key in old if key not in current]
            where = " AND ".join(f"{col} = ?" for col in keys)
            conn.executemany(f"DELETE FROM {table} WHERE {where}", gone)
            changed = [row for key, row in current.items() if old.get(key) != row]
            marks = ", ".join("?" * len(COLUMNS[table]))
            conn.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", changed)
        if written == 0:
            conn.execute("DELETE FROM events")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            [_event_values(event) for event in events[written:]],
        )

    @staticmethod
    def _write_sequence(conn: sqlite3.Connection, next_event_id: int) -> None:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'events'")
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (next_event_id - 1,)
        )

    def forget_hosts(self) -> None:
        """Empty the database's Host rows and keep the rest (Pools, VMs, Leases, events): a
        battery that lost its `hosts` table, for tests of what puts the Hosts back (TD-006).
        Run it while no fake battery uses the file; DatabaseError for a file it cannot read."""
        if not self.path.exists():
            raise DatabaseError(self.path, "no such file")
        try:
            conn = self._connection()
            with self._transaction(conn):
                conn.execute("DELETE FROM hosts")
        except sqlite3.Error as err:
            raise DatabaseError(self.path, f"write: {type(err).__name__}: {err}") from err
        finally:
            self.close()
