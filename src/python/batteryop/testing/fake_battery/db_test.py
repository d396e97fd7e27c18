"""Tests of the fake battery's database file (BA-060, TD-005): round trip, refusals, commits."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.db import Database, DatabaseError
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
    assert [p.name for p in tmp_path.iterdir()] == ["poolmgr.db"]  # no temporary file left


@pytest.mark.req("TD-005")
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"SQLite format 3\x00" + bytes(100), "not a fake battery database"),
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


@pytest.mark.req("TD-005")
def test_a_corrupt_row_is_refused() -> None:
    db = Database("x.db")
    good = db.encode(_store()).decode()
    bad = good.replace('"phase":"PROVISIONING"', '"phase":"SLEEPING"', 1)
    assert bad != good
    with pytest.raises(DatabaseError, match="corrupt"):
        db.decode(bad.encode())
    with pytest.raises(DatabaseError, match="corrupt"):
        db.decode(good.replace('"created_at":', '"created_at":"soon","x":', 1).encode())


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
