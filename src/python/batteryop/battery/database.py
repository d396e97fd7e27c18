"""battery's database: a consistent copy while battery runs, and a restore (DP-116..DP-119).

battery keeps its Pools, MicroVMs and Leases in one SQLite file (`-db`, WAL journal;
battery-api.md §6), the one piece of an installation's state the cluster does not hold. The
operator's image carries this module as `battery-operator db`:

    battery-operator db backup [--db /data/poolmgr.db] [-o FILE|-]
    battery-operator db check FILE|-
    battery-operator db restore FILE|- [--db /data/poolmgr.db] [--keep-free-microvms]

- **backup** reads the live database through SQLite's online backup API, in one step: the copy
  is the database as of one transaction, while battery goes on writing (WAL readers never
  block its writer). The copy is written beside the database first (never in memory, never
  in the container's small /tmp), checked, made one self-contained file, then streamed out.
- **check** says whether a file is a battery database a restore would take, and what it holds.
- **restore** streams the copy to a file beside the database, checks it, and only then
  replaces the database, keeping the one it replaces in `replaced-<UTC time>/` (nothing is
  lost). It refuses while another process has the database open (battery still running).
  A copy's free MicroVMs (provisioning, or available with no Lease) are marked DELETING before
  battery reads it: any of them may have been leased after the copy was taken, and battery
  would hand it out again; battery deletes them (NOT_FOUND counts as deleted) and makes new
  ones, so no MicroVM is ever handed out twice. `--keep-free-microvms` skips that, for a copy
  known to be the last state (taken with battery stopped).

Every fact is read through battery's own schema (tables `pools`, `vms`, `leases`; `phase` as
the VMPhase number), so it works on poolmgrd's file and on the fake battery's alike.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from battery_protos.poolmgr.v1alpha1 import types_pb2

DEFAULT_DB: Final = Path("/data/poolmgr.db")
"""Where install.yaml's battery keeps its database (`-db`, on the battery-data volume)."""
CHUNK: Final = 1 << 20
TABLES: Final = ("pools", "vms", "leases")
"""The tables every battery database has (battery-api.md §6), which a copy must have."""
FREE_PHASES: Final = (
    types_pb2.PROVISIONING,
    types_pb2.CREATE_HOOK_RUNNING,
    types_pb2.AVAILABLE,
)
"""A MicroVM no Lease holds in the copy, which may have been leased since it was taken."""
REPLACED_PREFIX: Final = "replaced-"
_SIDECARS: Final = ("-wal", "-shm")


class DatabaseError(Exception):
    """A copy or database a command cannot take, with the reason in one line."""


@dataclass(frozen=True)
class Summary:
    """What a database file holds."""

    schema: int
    pools: int
    microvms: int
    leases: int
    size: int
    sha256: str = ""

    def line(self) -> str:
        digest = f", sha256 {self.sha256}" if self.sha256 else ""
        return (
            f"{self.pools} Pools, {self.microvms} MicroVMs, {self.leases} Leases, schema "
            f"version {self.schema}, {self.size} bytes{digest}"
        )


def _connect(path: Path) -> sqlite3.Connection:
    """An existing file, never created (mode=rw), in autocommit."""
    if not path.is_file():
        raise DatabaseError(f"{path}: no such database file")
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None, timeout=10)


def summarize(conn: sqlite3.Connection, path: Path) -> Summary:
    """Check conn is a whole battery database and count what it holds (DP-118)."""
    try:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            problems = "; ".join(str(row[0]) for row in result[:3])
            raise DatabaseError(f"{path}: the database is damaged: {problems}")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        missing = [t for t in TABLES if t not in tables]
        if missing:
            raise DatabaseError(f"{path}: not a battery database (no table {', '.join(missing)})")
        pools, vms, leases = (
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES
        )
        schema = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as err:
        raise DatabaseError(f"{path}: not a battery database ({err})") from err
    return Summary(schema, pools, vms, leases, size=path.stat().st_size)


def _scratch(db: Path, what: str) -> Path:
    """A file beside db, on its volume (a rename into place is then atomic)."""
    return db.with_name(f".{db.name}.{what}-{os.getpid()}")


def _unlink(path: Path) -> None:
    for name in (path.name, *(path.name + s for s in _SIDECARS)):
        path.with_name(name).unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _single_file(conn: sqlite3.Connection) -> None:
    """The copy keeps the source's WAL mark; in DELETE mode it is one file, nothing beside."""
    if conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] != "delete":
        raise DatabaseError("could not make the copy a single file")


@contextlib.contextmanager
def _closing(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    try:
        yield conn
    finally:
        conn.close()


def backup(db: Path, out: BinaryIO) -> Summary:
    """Write a consistent copy of the live database db to out (DP-116)."""
    scratch = _scratch(db, "backup")
    _unlink(scratch)
    try:
        with _closing(_connect(db)) as source:
            try:
                tables = {row[0] for row in source.execute("SELECT name FROM sqlite_master")}
            except sqlite3.DatabaseError as err:
                raise DatabaseError(f"{db}: not a battery database ({err})") from err
            if not set(TABLES) <= tables:
                raise DatabaseError(f"{db}: not a battery database (no table {TABLES[0]})")
            with _closing(sqlite3.connect(scratch, isolation_level=None)) as copy:
                source.backup(copy)  # one step: the copy is one transaction's view
                _single_file(copy)
                summary = summarize(copy, scratch)
        with scratch.open("rb") as file:
            digest = _copy(file, out)
        out.flush()
        return dataclasses.replace(summary, sha256=digest)
    finally:
        _unlink(scratch)


def _copy(source: BinaryIO, out: BinaryIO) -> str:
    """Stream source to out, a chunk at a time; the sha256 of what passed."""
    digest = hashlib.sha256()
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest()


def receive(source: BinaryIO, target: Path) -> str:
    """Stream source into target (fsynced); its sha256."""
    with target.open("wb") as file:
        digest = _copy(source, file)
        file.flush()
        os.fsync(file.fileno())
    return digest


def check(source: BinaryIO, scratch_dir: Path) -> Summary:
    """Whether source is a battery database a restore would take, and what it holds."""
    scratch = scratch_dir / f".battery-check-{os.getpid()}.db"
    _unlink(scratch)
    try:
        digest = receive(source, scratch)
        with _closing(_connect(scratch)) as conn:
            summary = summarize(conn, scratch)
        return dataclasses.replace(summary, sha256=digest)
    finally:
        _unlink(scratch)


def retire_free_microvms(conn: sqlite3.Connection, now_ns: int) -> int:
    """Mark the copy's MicroVMs no Lease holds DELETING (DP-117); how many."""
    marks = ",".join("?" * len(FREE_PHASES))
    cursor = conn.execute(
        f"UPDATE vms SET phase = ?, updated_at = ? WHERE lease_id IS NULL AND phase IN ({marks})",
        (types_pb2.DELETING, now_ns, *FREE_PHASES),
    )
    return cursor.rowcount


def _refuse_if_open(db: Path) -> None:
    """A database battery has open cannot leave WAL mode: then it is in use (DP-119)."""
    if not db.exists():
        return
    in_use = DatabaseError(
        f"{db} is open in another process (is battery running?): stop the operator's Pod "
        "first (scale its Deployment to 0)"
    )
    try:
        with _closing(_connect(db)) as conn:
            conn.execute("PRAGMA busy_timeout=0")
            if conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] != "delete":
                raise in_use
    except sqlite3.OperationalError as err:
        raise in_use from err


@dataclass(frozen=True)
class Restored:
    summary: Summary
    retired: int
    replaced: Path | None


def restore(source: BinaryIO, db: Path, *, keep_free: bool = False) -> Restored:
    """Replace db with the copy source (DP-117, DP-118, DP-119); the one replaced is kept."""
    incoming = _scratch(db, "restoring")
    _unlink(incoming)
    try:
        digest = receive(source, incoming)
        with _closing(_connect(incoming)) as conn:
            summary = summarize(conn, incoming)  # refused before anything is replaced
            _single_file(conn)
            retired = 0 if keep_free else retire_free_microvms(conn, time.time_ns())
        _fsync(incoming)
        _refuse_if_open(db)
        replaced = None
        if db.exists():
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            replaced = db.parent / f"{REPLACED_PREFIX}{stamp}"
            replaced.mkdir()
            for name in (db.name, *(db.name + s for s in _SIDECARS)):
                if (db.parent / name).exists():
                    shutil.move(db.parent / name, replaced / name)
        os.replace(incoming, db)
        _fsync(db.parent)
        return Restored(dataclasses.replace(summary, sha256=digest), retired, replaced)
    finally:
        _unlink(incoming)


# --- `battery-operator db` -----------------------------------------------------------------------


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Back up, check and restore battery's database."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("backup", help="write a consistent copy of the live database")
    make.add_argument("--db", type=Path, default=DEFAULT_DB, help="battery's database file")
    make.add_argument("-o", "--output", default="-", help="where to write the copy (- stdout)")
    look = commands.add_parser("check", help="say whether a copy would restore, and what it holds")
    look.add_argument("copy", help="the copy (- for stdin)")
    look.add_argument(
        "--scratch", type=Path, default=DEFAULT_DB.parent, help="a folder to check the copy in"
    )
    put = commands.add_parser("restore", help="replace the database with a copy (battery stopped)")
    put.add_argument("copy", help="the copy (- for stdin)")
    put.add_argument("--db", type=Path, default=DEFAULT_DB, help="battery's database file")
    put.add_argument(
        "--keep-free-microvms",
        action="store_true",
        help="keep the copy's free MicroVMs (only for a copy taken with battery stopped)",
    )
    return parser


@contextlib.contextmanager
def _opened(name: str, mode: str) -> Iterator[BinaryIO]:
    if name == "-":
        yield sys.stdout.buffer if "w" in mode else sys.stdin.buffer
        return
    try:
        with open(name, mode) as file:  # - a binary stream either way
            yield file  # type: ignore[misc]
    except OSError as err:
        raise DatabaseError(f"{name}: {err.strerror or err}") from err


def main(argv: Sequence[str], prog: str = "battery-operator db") -> int:
    """The command line: 0 done, 1 refused or failed (one line on stderr), 2 bad usage."""
    args = _parser(prog).parse_args(argv)
    started = time.monotonic()
    try:
        if args.command == "backup":
            with _opened(args.output, "wb") as out:
                summary = backup(args.db, out)
            took = time.monotonic() - started
            print(f"{prog}: backed up {summary.line()} in {took:.2f} s", file=sys.stderr)
        elif args.command == "check":
            with _opened(args.copy, "rb") as source:
                summary = check(source, args.scratch)
            print(f"{prog}: a battery database: {summary.line()}", file=sys.stderr)
        else:
            with _opened(args.copy, "rb") as source:
                done = restore(source, args.db, keep_free=args.keep_free_microvms)
            kept = f"; the database it replaced is in {done.replaced}" if done.replaced else ""
            print(
                f"{prog}: restored {done.summary.line()}; {done.retired} free MicroVMs marked "
                f"DELETING (battery deletes them and makes new ones){kept}",
                file=sys.stderr,
            )
    except DatabaseError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    return 0
