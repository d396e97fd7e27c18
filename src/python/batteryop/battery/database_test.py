"""battery's database copied while it is written, checked and restored (DP-116..DP-119), on the
fake battery's real database (its schema is poolmgrd's: `vms`, `leases`, `phase` numbers)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.battery import database
from batteryop.testing.fake_battery.db import Database
from batteryop.testing.fake_battery.store import LeaseRow, Phase, Store, VmRow
from batteryop.testing.fake_battery.testkit import pool_spec

T0 = datetime(2026, 12, 6, 19, 0, tzinfo=UTC)
KEY = ("ns", "p")
PHASES = [Phase.AVAILABLE, Phase.PROVISIONING, Phase.LEASED, Phase.QUARANTINED, Phase.DELETING]


def _battery_db(path: Path, vms: int = 10) -> Database:
    """A database as the fake battery writes it: VMs in every phase, the LEASED ones leased."""
    store = Store(lambda: T0)
    store.put_pool(KEY, pool_spec("p", "ns", ["host-a"], size=vms))
    for i in range(vms):
        phase = PHASES[i % len(PHASES)]
        lease = f"lease-{i}" if phase == Phase.LEASED else None
        store.add_vm(VmRow(f"uid-{i}", f"p-{i}", KEY, "host-a", phase, lease, T0, T0))
        if lease:
            store.add_lease(
                LeaseRow(lease, f"uid-{i}", KEY, T0, T0, T0 + timedelta(minutes=10), f"req-{i}")
            )
    db = Database(path)
    db.load()
    db.save(store)
    return db


def _phases(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT uid, phase FROM vms").fetchall())


def _dump(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return list(conn.iterdump())


def test_backup_copies_what_battery_committed_into_one_file_while_it_keeps_it_open(
    tmp_path: Path,
) -> None:
    db = _battery_db(tmp_path / "poolmgr.db")  # open, WAL: its rows are still in -wal
    assert (tmp_path / "poolmgr.db-wal").stat().st_size > 0
    out = io.BytesIO()
    summary = database.backup(tmp_path / "poolmgr.db", out)  # DP-116
    copy = tmp_path / "copy.db"
    copy.write_bytes(out.getvalue())
    assert (summary.pools, summary.microvms, summary.leases) == (1, 10, 2)
    assert summary.size == len(out.getvalue())
    assert summary.sha256 == hashlib.sha256(out.getvalue()).hexdigest()
    with contextlib.closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file
    assert _phases(copy) == _phases(tmp_path / "poolmgr.db")
    assert not list(tmp_path.glob(".poolmgr.db.backup-*")), "the scratch copy was left"
    db.close()


def test_a_copy_under_a_writer_is_one_transactions_view(tmp_path: Path) -> None:
    path = tmp_path / "poolmgr.db"
    _battery_db(path, vms=0).close()
    stop, first = threading.Event(), threading.Event()

    def write() -> None:
        # Each transaction leases a new MicroVM: a VM row and its Lease row together.
        conn = sqlite3.connect(path, isolation_level=None)
        i = 0
        while not stop.is_set():
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO vms VALUES (?, ?, 'ns', 'p', 'host-a', ?, ?, 0, 0)",
                (f"w-{i}", f"p-{i}", types_pb2.LEASED, f"l-{i}"),
            )
            conn.execute(
                "INSERT INTO leases VALUES (?, ?, 'ns', 'p', 0, 0, 0, NULL)", (f"l-{i}", f"w-{i}")
            )
            conn.execute("COMMIT")
            first.set()
            i += 1
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert first.wait(10)
        counts = []
        for _ in range(20):
            out = io.BytesIO()
            summary = database.backup(path, out)
            counts.append(summary.leases)
            assert summary.microvms == summary.leases  # never a VM without its Lease
    finally:
        stop.set()
        writer.join()
    assert counts[-1] > counts[0] > 0, counts  # the writer went on between the copies


def test_restore_retires_the_free_microvms_and_keeps_what_it_replaced(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    _battery_db(source / "poolmgr.db").close()
    out = io.BytesIO()
    database.backup(source / "poolmgr.db", out)
    data = tmp_path / "data"
    data.mkdir()
    _battery_db(data / "poolmgr.db", vms=3).close()  # the database the restore replaces
    before = _dump(data / "poolmgr.db")
    done = database.restore(io.BytesIO(out.getvalue()), data / "poolmgr.db")
    # DP-117: any MicroVM free in the copy may have been leased since; none is handed out again.
    phases = _phases(data / "poolmgr.db")
    free = {f"uid-{i}" for i in range(10) if PHASES[i % 5] in (Phase.AVAILABLE, Phase.PROVISIONING)}
    assert done.retired == len(free) == 4
    assert {uid for uid, phase in phases.items() if phase == Phase.DELETING} >= free
    assert all(phases[f"uid-{i}"] == PHASES[i % 5] for i in range(10) if f"uid-{i}" not in free)
    assert done.replaced is not None and done.replaced.name.startswith(database.REPLACED_PREFIX)
    assert _dump(done.replaced / "poolmgr.db") == before  # nothing is lost
    assert sorted(p.name for p in data.iterdir()) == ["poolmgr.db", done.replaced.name]
    # The fake battery opens it, Leases and all.
    restored = Database(data / "poolmgr.db").load()
    assert restored is not None and set(restored.leases) == {"lease-2", "lease-7"}


def test_keep_free_microvms_restores_the_copy_as_it_is(tmp_path: Path) -> None:
    _battery_db(tmp_path / "a.db").close()
    out = io.BytesIO()
    database.backup(tmp_path / "a.db", out)
    done = database.restore(io.BytesIO(out.getvalue()), tmp_path / "b.db", keep_free=True)
    assert done.retired == 0 and done.replaced is None
    assert _phases(tmp_path / "b.db") == _phases(tmp_path / "a.db")


HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("SELECT count(*) FROM vms").fetchone()
print("open", flush=True)
sys.stdin.read()
"""


def test_restore_refuses_while_battery_has_the_database_open(tmp_path: Path) -> None:
    _battery_db(tmp_path / "poolmgr.db").close()
    out = io.BytesIO()
    database.backup(tmp_path / "poolmgr.db", out)
    before = (tmp_path / "poolmgr.db").read_bytes()
    # Another process, as battery is: POSIX locks are per process.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "poolmgr.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(database.DatabaseError, match="open in another process.*scale"):
            database.restore(io.BytesIO(out.getvalue()), tmp_path / "poolmgr.db")  # DP-119
    finally:
        holder.communicate("")
    assert (tmp_path / "poolmgr.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poolmgr.db"]


@pytest.mark.parametrize(
    ("copy", "why"),
    [
        (b"", "not a battery database"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "not a battery database"),
        (b"hello, world" * 100, "not a battery database"),
    ],
)
def test_restore_refuses_what_is_not_a_whole_battery_database(
    tmp_path: Path, copy: bytes, why: str
) -> None:
    _battery_db(tmp_path / "poolmgr.db").close()
    before = (tmp_path / "poolmgr.db").read_bytes()
    with pytest.raises(database.DatabaseError, match=why):  # DP-118
        database.restore(io.BytesIO(copy), tmp_path / "poolmgr.db")
    assert (tmp_path / "poolmgr.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poolmgr.db"]


def test_restore_refuses_another_applications_database_and_a_damaged_copy(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE pools (x)")
        conn.commit()
    with pytest.raises(database.DatabaseError, match="no table vms, leases"):
        database.restore(io.BytesIO(other.read_bytes()), tmp_path / "poolmgr.db")
    _battery_db(tmp_path / "a.db", vms=400).close()
    out = io.BytesIO()
    database.backup(tmp_path / "a.db", out)
    damaged = bytearray(out.getvalue())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 4096] = b"\xff" * 4096
    with pytest.raises(database.DatabaseError, match="damaged|not a battery database"):
        database.restore(io.BytesIO(bytes(damaged)), tmp_path / "poolmgr.db")
    assert not (tmp_path / "poolmgr.db").exists()


def test_the_command_line_says_what_it_did_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _battery_db(tmp_path / "poolmgr.db").close()
    copy = tmp_path / "copy.db"
    assert database.main(["backup", "--db", str(tmp_path / "poolmgr.db"), "-o", str(copy)]) == 0
    assert "backed up 1 Pools, 10 MicroVMs, 2 Leases" in capsys.readouterr().err
    assert database.main(["check", str(copy), "--scratch", str(tmp_path)]) == 0
    assert "a battery database: 1 Pools" in capsys.readouterr().err
    target = tmp_path / "new" / "poolmgr.db"
    target.parent.mkdir()
    assert database.main(["restore", str(copy), "--db", str(target)]) == 0
    assert "4 free MicroVMs marked DELETING" in capsys.readouterr().err
    # One line naming the cause, exit 1; nothing replaced.
    assert database.main(["restore", str(tmp_path / "missing.db"), "--db", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.db" in err, err
    with pytest.raises(SystemExit) as usage:
        database.main(["restore"])
    assert usage.value.code == 2
