"""What backing up and restoring battery's database costs (DP-116..DP-118), at 10,000 Leases.

The database is the fake battery's own file (poolmgrd's schema) of one Pool of 2 x CLAIMS VMs,
every other one leased (CLAIMS Leases, as 10,000 Bound claims hold), with two outbox events per
VM. `battery-operator db backup` and `restore` (`batteryop.battery.database`) run on it ROUNDS
times each; prints the file's size and each command's median and p99.

Smoke pass by default (1,000 claims); BATTERYOP_BENCH=1 for the full one.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path

from bench.fake_battery_db_bench import battery_state
from bench.stats import FULL, latency_figures

from batteryop.battery import database
from batteryop.testing.fake_battery.db import Database

CLAIMS = 10_000 if FULL else 1_000
ROUNDS = 20 if FULL else 3


def test_backup_and_restore_of_10000_claims() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "poolmgr.db"
        db = Database(live)
        db.load()
        db.save(battery_state(2 * CLAIMS))  # battery keeps it open, WAL and all
        backups, restores = [], []
        copy = b""
        for _ in range(ROUNDS):
            out = io.BytesIO()
            started = time.perf_counter()
            summary = database.backup(live, out)
            backups.append(time.perf_counter() - started)
            copy = out.getvalue()
        target = Path(tmp) / "restored" / "poolmgr.db"
        target.parent.mkdir()
        for _ in range(ROUNDS):
            started = time.perf_counter()
            done = database.restore(io.BytesIO(copy), target)
            restores.append(time.perf_counter() - started)
        db.close()
    assert summary.leases == CLAIMS and done.retired == CLAIMS
    print()
    print(
        json.dumps(
            {
                "bench": "battery_db_backup",
                "claims": CLAIMS,
                "microvms": summary.microvms,
                "bytes": summary.size,
                "backup": latency_figures(backups, ndigits=3),
                "restore": latency_figures(restores, ndigits=3),
            }
        )
    )
