"""Tests of the fake battery's database (BA-060, TD-005): round trip, refusals, migrations,
commits."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf import json_format

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.db import SCHEMA_VERSION, Database, DatabaseError, host_row
from batteryop.testing.fake_battery.hosts import HostConfig, HostConnection, HostTLSConfig
from batteryop.testing.fake_battery.store import (
    BACKGROUND_WRITE_DELAY,
    LeaseRow,
    Phase,
    Store,
    VmRow,
)
from batteryop.testing.fake_battery.testkit import pool_spec
from batteryop.testing.processes import module_command

T0 = datetime(2026, 12, 1, 7, 0, 0, 123456, tzinfo=UTC)


def _store(now: datetime = T0, vm_count: int = 4) -> Store:
    store = Store(lambda: now)
    key = ("ns", "p")
    store.put_pool(key, pool_spec("p", "ns", ["host-a", "host-b"], size=vm_count))
    store.put_pool(("other", "q"), pool_spec("q", "other", ["host-a"], pre_lease_commands=["x"]))
    phases = [Phase.AVAILABLE, Phase.PROVISIONING, Phase.QUARANTINED, Phase.DELETING]
    for i in range(vm_count):
        store.add_vm(
            VmRow(
                uid=f"uid-{i}",
                flintlock_id=f"p-{i:08x}",
                pool=key,
                host="host-a" if i % 2 else "host-b",
                phase=phases[i % len(phases)],
                lease_id=None,
                created_at=now - timedelta(seconds=i),
                updated_at=now,
            )
        )
        store.emit(types_pb2.VM_PROVISIONED, key, f"uid-{i}")
    store.add_lease(
        LeaseRow(
            lease_id="lease-1",
            vm_uid="uid-0",
            pool=key,
            claimed_at=now,
            last_heartbeat_at=now,
            expires_at=now + timedelta(seconds=30, microseconds=7),
            request_id="claim-uid",
        )
    )
    store.emit(types_pb2.VM_CLAIMED, key, "uid-0")
    cordoned = HostConnection(HostConfig("host-a", "127.0.0.1:1"), now)
    cordoned.cordoned, cordoned.cordoned_reason, cordoned.cordoned_at = True, "drain", now
    tls = HostTLSConfig(insecure=False, ca_file="/ca.pem", cert_file="/c.pem", key_file="/k.pem")
    store.hosts = {
        "host-a": cordoned,
        "host-b": HostConnection(HostConfig("host-b", "127.0.0.2:1", tls), now),
    }
    return store


@pytest.mark.req("BA-060", "TD-005")
def test_the_durable_state_survives_a_round_trip(tmp_path: Path) -> None:
    store = _store()
    db = Database(tmp_path / "poolmgr.db")
    db.save(store)
    got = Database(db.path).load()
    assert got is not None
    assert got.pools == store.pools
    assert got.vms == store.vms  # every field, timestamps to the microsecond
    assert got.leases == store.leases
    assert got.vms["uid-0"].phase == Phase.LEASED and got.vms["uid-0"].lease_id == "lease-1"
    assert got.events == store.events
    assert got.next_event_id == store.next_event_id == len(store.events) + 1
    assert sorted(got.hosts) == ["host-a", "host-b"]
    a, b = got.hosts["host-a"], got.hosts["host-b"]
    assert (a.cordoned, a.cordoned_reason, a.cordoned_at.ToDatetime(UTC)) == (True, "drain", T0)
    assert (b.address, b.tls.ca_file, b.tls.insecure) == ("127.0.0.2:1", "/ca.pem", False)


@pytest.mark.req("TD-006")
def test_forgetting_the_hosts_keeps_every_other_row(tmp_path: Path) -> None:
    store = _store()
    Database(tmp_path / "poolmgr.db").save(store)
    Database(tmp_path / "poolmgr.db").forget_hosts()
    got = Database(tmp_path / "poolmgr.db").load()
    assert got is not None
    assert got.hosts == {}
    assert (got.pools, got.vms, got.leases) == (store.pools, store.vms, store.leases)
    assert (got.events, got.next_event_id) == (store.events, store.next_event_id)
    with pytest.raises(DatabaseError, match="poolmgr-missing.db"):
        Database(tmp_path / "poolmgr-missing.db").forget_hosts()


@pytest.mark.req("BA-060")
def test_a_missing_file_is_a_fresh_database_and_saves_replace_the_file(tmp_path: Path) -> None:
    db = Database(tmp_path / "poolmgr.db")
    assert db.load() is None
    store = _store()
    db.save(store)
    store.remove_lease("lease-1")
    store.delete_pool(("other", "q"))
    store.emit(types_pb2.VM_DELETED_ON_RELEASE, ("ns", "p"), "uid-0")
    db.save(store)
    got = db.load()
    assert got is not None
    assert (got.leases, sorted(got.pools)) == ({}, [("ns", "p")])
    assert got.events == store.events
    db.close()
    assert [p.name for p in tmp_path.iterdir()] == ["poolmgr.db"]  # no temporary file left


@pytest.mark.req("BA-060")
def test_a_save_writes_only_what_changed_and_a_new_store_whole(tmp_path: Path) -> None:
    db = Database(tmp_path / "poolmgr.db")
    store = _store()
    db.save(store)
    statements: list[str] = []
    assert db._conn is not None
    db._conn.set_trace_callback(statements.append)
    store.renew(store.leases["lease-1"], T0, T0 + timedelta(minutes=1))
    db.save(store)
    writes = [s for s in statements if s.split()[0] in ("INSERT", "DELETE", "UPDATE")]
    assert len(writes) == 1 and writes[0].startswith("INSERT OR REPLACE INTO leases"), writes
    other = _store(vm_count=2)
    db.save(other)
    got = Database(db.path).load()
    assert got is not None and sorted(got.vms) == ["uid-0", "uid-1"]
    assert (got.events, got.next_event_id) == (other.events, other.next_event_id)


@pytest.mark.req("TD-005")
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"SQLite format 3\x00" + bytes(100), "not a fake battery database"),
        (b"not a database at all, " * 40, "not a fake battery database"),
        (b"batteryop-fake-battery-db 2\n{}\n", "format version '2'"),
        (b'batteryop-fake-battery-db 1\n{"pools": [\n', "corrupt"),
        (b"batteryop-fake-battery-db 1\n", "corrupt"),
    ],
)
def test_a_foreign_or_corrupt_file_is_refused_naming_it(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "poolmgr.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseError) as info:
        Database(path).load()
    assert str(path) in str(info.value) and says in str(info.value)
    assert path.read_bytes() == content  # refused, not changed


@pytest.mark.req("TD-005")
@pytest.mark.parametrize(
    ("pragmas", "says"),
    [
        ("PRAGMA user_version=1", "not a fake battery database (another application's)"),
        ("CREATE TABLE vms (uid TEXT)", "not a fake battery database (another application's)"),
        (
            f"PRAGMA application_id={0x62617466}; PRAGMA user_version={SCHEMA_VERSION + 1}",
            f"schema version {SCHEMA_VERSION + 1} is newer than this fake battery supports",
        ),
    ],
)
def test_a_foreign_or_newer_sqlite_database_is_refused(
    tmp_path: Path, pragmas: str, says: str
) -> None:
    path = tmp_path / "poolmgr.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(pragmas)
    conn.close()
    with pytest.raises(DatabaseError, match="poolmgr.db") as info:
        Database(path).load()
    assert says in str(info.value)


@pytest.mark.req("TD-005")
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("UPDATE vms SET phase = 99 WHERE uid = 'uid-1'", "corrupt"),
        ("UPDATE vms SET created_at = 'soon' WHERE uid = 'uid-1'", "corrupt"),
        ('UPDATE pools SET spec = \'{"size": "many"}\'', "corrupt"),
    ],
)
def test_a_corrupt_row_is_refused(tmp_path: Path, change: str, says: str) -> None:
    path = tmp_path / "poolmgr.db"
    db = Database(path)
    db.save(_store())
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute(change)
    conn.close()
    with pytest.raises(DatabaseError, match=says):
        Database(path).load()


def _old_format(store: Store) -> bytes:
    """store's state in the fake's old file format (`db_legacy.py`), as an older fake wrote it."""

    def msg(message: object) -> dict[str, object]:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)  # type: ignore[arg-type]

    def ns(when: datetime) -> int:
        return int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) * 1000

    state = {
        "next_event_id": store.next_event_id,
        "pools": [msg(spec) for spec in store.pools.values()],
        "vms": [
            {
                "uid": vm.uid,
                "flintlock_id": vm.flintlock_id,
                "pool_namespace": vm.pool[0],
                "pool_name": vm.pool[1],
                "host": vm.host,
                "phase": Phase.Name(vm.phase),
                "lease_id": vm.lease_id,
                "created_at": ns(vm.created_at),
                "updated_at": ns(vm.updated_at),
            }
            for vm in store.vms.values()
        ],
        "leases": [
            {
                "lease_id": x.lease_id,
                "vm_uid": x.vm_uid,
                "pool_namespace": x.pool[0],
                "pool_name": x.pool[1],
                "claimed_at": ns(x.claimed_at),
                "last_heartbeat_at": ns(x.last_heartbeat_at),
                "expires_at": ns(x.expires_at),
                "request_id": x.request_id,
            }
            for x in store.leases.values()
        ],
        "hosts": [msg(host_row(conn)) for conn in store.hosts.values()],
    }
    lines = ["batteryop-fake-battery-db 1", json.dumps(state)]
    lines += [json.dumps(msg(event)) for event in store.events]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.req("BA-060", "TD-005")
def test_a_file_of_the_old_format_is_migrated_on_first_open_keeping_everything(
    tmp_path: Path,
) -> None:
    store = _store()
    store.next_event_id += 3  # ids the old file had given out stay given out
    path = tmp_path / "poolmgr.db"
    path.write_bytes(_old_format(store))
    got = Database(path).load()
    assert got is not None
    assert (got.pools, got.vms, got.leases) == (store.pools, store.vms, store.leases)
    assert (got.events, got.next_event_id) == (store.events, store.next_event_id)
    assert got.hosts == {name: host_row(conn) for name, conn in store.hosts.items()}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        leases = conn.execute("SELECT lease_id, vm_uid FROM leases").fetchall()
    conn.close()
    assert leases == [("lease-1", "uid-0")]  # poolmgrd's table and columns
    assert sorted(p.name for p in tmp_path.iterdir() if "migrating" in p.name) == []


@pytest.mark.req("BA-060")
async def test_commits_are_written_once_before_answers_leave_and_soon_otherwise() -> None:
    writes: list[int] = []
    store = Store(lambda: T0, persist=lambda s: writes.append(len(s.events)))
    key = ("ns", "p")
    for uid in ("a", "b", "c"):
        store.emit(types_pb2.VM_PROVISIONED, key, uid)
    assert writes == []
    # Two answers leaving in one turn share one write (group commit).
    await asyncio.gather(store.synced(), store.synced())
    assert writes == [3]
    await store.synced()
    assert writes == [3]  # nothing changed since
    store.emit(types_pb2.VM_AVAILABLE, key, "a")  # nobody waits: written in the background
    await asyncio.sleep(BACKGROUND_WRITE_DELAY * 5)
    assert writes == [3, 4]


@pytest.mark.req("BA-060")
async def test_a_failed_write_stays_pending_and_is_retried() -> None:
    fail = [True]
    written: list[int] = []

    def persist(s: Store) -> None:
        if fail[0]:
            raise DatabaseError(Path("x.db"), "write: No space left on device")
        written.append(len(s.events))

    store = Store(lambda: T0, persist=persist)
    store.emit(types_pb2.VM_PROVISIONED, ("ns", "p"), "a")
    with pytest.raises(DatabaseError):
        await store.synced()  # the turn's write failed (logged); the answer's retry fails too
    fail[0] = False
    await store.synced()  # still pending: written now
    assert written == [1]


@pytest.mark.req("TD-005")
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"batteryop-fake-battery-db 2\n{}\n", "format version '2'"),
        (b'batteryop-fake-battery-db 1\n{"pools": [\n', "corrupt"),
    ],
)
def test_an_unreadable_database_stops_the_process_with_one_line(
    tmp_path: Path, content: bytes, says: str
) -> None:
    db = tmp_path / "poolmgr.db"
    db.write_bytes(content)
    command, env = module_command("batteryop.testing.fake_battery")
    done = subprocess.run(
        [*command, "--listen=127.0.0.1:0", "--host=a=127.0.0.1:1", f"-db={db}"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, lines
    assert len(lines) == 1 and str(db) in lines[0] and says in lines[0], lines
    assert db.read_bytes() == content  # refused, not overwritten
