"""What the fake battery's database file (`-db`, BA-060) costs.

1. `db_write`: writing one changed Lease (one SQLite transaction, fsync'd) of the state of one
   Pool of VMS VMs, half of them leased, with two outbox events per VM.
2. `claim_burst`: BURST concurrent ClaimVMs against a warm Pool on two fake flintlockd Hosts,
   with and without a database: each claim's round trip, the burst's wall time, and how many
   writes the burst made (writes are coalesced per event-loop turn and made before each answer
   leaves, see `Store.commit`).

Prints one JSON line per figure. Smoke pass by default; BATTERYOP_BENCH=1 for the full one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from bench.stats import FULL, latency_figures

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.fake_battery.db import Database
from batteryop.testing.fake_battery.store import LeaseRow, Phase, Store, VmRow
from batteryop.testing.fake_battery.testkit import BatteryStubs, pool_spec, ref_of
from batteryop.testing.fake_flintlock import FakeFlintlockd

VMS = 300 if FULL else 50
WRITES = 200 if FULL else 20
BURST = 100 if FULL else 10


def battery_state(vms: int) -> Store:
    """One Pool of `vms` VMs, every other one leased, two outbox events each."""
    now = datetime.now(UTC)
    store = Store(lambda: now)
    key = ("bench", "big")
    store.put_pool(key, pool_spec("big", "bench", ["host-a", "host-b"], size=vms))
    for i in range(vms):
        uid = str(uuid.uuid4())
        lease_id = str(uuid.uuid4()) if i % 2 else None
        phase = Phase.LEASED if lease_id else Phase.AVAILABLE
        store.add_vm(VmRow(uid, f"big-{i:08x}", key, "host-a", phase, lease_id, now, now))
        store.emit(types_pb2.VM_PROVISIONED, key, uid)
        store.emit(types_pb2.VM_AVAILABLE, key, uid)
        if lease_id:
            lease = LeaseRow(lease_id, uid, key, now, now, now + timedelta(minutes=1), uid)
            store.add_lease(lease)
    return store


async def test_db_write_cost() -> None:
    store = battery_state(VMS)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "poolmgr.db")
        db.save(store)  # the first write: every row
        leases = list(store.leases.values())
        write = []
        for i in range(WRITES):
            lease = leases[i % len(leases)]
            store.renew(lease, lease.last_heartbeat_at, lease.expires_at + timedelta(seconds=1))
            started = time.perf_counter()
            db.save(store)  # one changed row, one transaction
            write.append(time.perf_counter() - started)
        db.close()
        size = (Path(tmp) / "poolmgr.db").stat().st_size
    print()
    print(
        json.dumps(
            {
                "bench": "fake_battery_db_write",
                "vms": VMS,
                "events": len(store.events),
                "bytes": size,
                "write_one_change": latency_figures(write, ndigits=3),
            }
        )
    )
    assert size > 0


@contextlib.asynccontextmanager
async def _battery(db: Path | None) -> AsyncIterator[tuple[FakeBattery, list[int]]]:
    async with contextlib.AsyncExitStack() as stack:
        hosts = {
            name: (await stack.enter_async_context(FakeFlintlockd.start(address=addr))).target
            for name, addr in (("host-a", "127.0.0.3"), ("host-b", "127.0.0.4"))
        }
        battery = await stack.enter_async_context(FakeBattery.start(hosts=hosts, db=db))
        writes = [0]
        if battery.db is not None:
            save = battery.db.save

            def counted(store: Store) -> None:
                writes[0] += 1
                save(store)

            battery.store._persist = counted  # - counting, the bench's own business
        yield battery, writes


async def _burst(db: Path | None) -> dict[str, object]:
    async with (
        _battery(db) as (battery, writes),
        grpc.aio.insecure_channel(battery.target) as channel,
    ):
        stubs = BatteryStubs.on(channel)
        spec = pool_spec("burst", "bench", ["host-a", "host-b"], size=BURST, expiry_threshold=60)
        await stubs.create_pool(spec)
        ref = ref_of(spec)
        await stubs.wait_status(
            ref, lambda s: s.available_count == BURST, what="a warm Pool", within=120
        )
        before = writes[0]
        times: list[float] = []

        async def claim(i: int) -> str:
            started = time.perf_counter()
            reply = await stubs.claim(ref, request_id=f"burst-{i}")
            times.append(time.perf_counter() - started)
            return reply.vm_uid

        started = time.perf_counter()
        uids = await asyncio.gather(*(claim(i) for i in range(BURST)))
        wall = time.perf_counter() - started
        assert len(set(uids)) == BURST
        return {
            "bench": "fake_battery_claim_burst",
            "db": db is not None,
            "claims": BURST,
            "wall_ms": round(wall * 1000, 1),
            "writes": writes[0] - before,
            **latency_figures(times),
        }


async def test_claim_burst_with_and_without_a_database() -> None:
    results = [await _burst(None)]
    with tempfile.TemporaryDirectory() as tmp:
        results.append(await _burst(Path(tmp) / "poolmgr.db"))
    print()
    for line in results:
        print(json.dumps(line))
    assert results[0]["writes"] == 0 and results[1]["writes"] != 0
