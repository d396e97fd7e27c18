"""The fake battery's state: Pools, VMs, Leases, the event outbox and Hosts.

It stands in for poolmgrd's SQLite database. Every change happens between two awaits on the
one event loop, so each method below is as atomic as one of poolmgrd's transactions (BA-005).
Every change that such a transaction would commit ends in `commit()`; with a database
(`-db`, SQLite, `db.Database`) that is what makes it durable (BA-060), see `commit()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from google.protobuf import timestamp_pb2

from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.testing.fake_battery.hosts import HostConnection

log = logging.getLogger(__name__)

BACKGROUND_WRITE_DELAY = 0.01
"""Seconds within which a change no answer waits for is written (`Store.commit`)."""

PoolKey = tuple[str, str]
"""(namespace, name) of a Pool."""

Phase = types_pb2.VMPhase

# The phases as plain ints, for loops over every VM of a Pool (`Store.counts`).
_AVAILABLE = Phase.AVAILABLE
_PRE_LEASE_HOOK_RUNNING = Phase.PRE_LEASE_HOOK_RUNNING
_LEASED = Phase.LEASED
_PROVISIONING = Phase.PROVISIONING
_CREATE_HOOK_RUNNING = Phase.CREATE_HOOK_RUNNING
_QUARANTINED = Phase.QUARANTINED

ACTIVE_PHASES = frozenset(
    {
        Phase.PROVISIONING,
        Phase.CREATE_HOOK_RUNNING,
        Phase.AVAILABLE,
        Phase.LEASED,
        Phase.PRE_LEASE_HOOK_RUNNING,
        Phase.QUARANTINED,
    }
)


def pool_key(namespace: str, name: str) -> PoolKey:
    return (namespace, name)


def pool_label(key: PoolKey) -> str:
    return f"{key[0]}/{key[1]}"


def timestamp(when: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    return ts


@dataclass
class VmRow:
    uid: str
    flintlock_id: str
    pool: PoolKey
    host: str
    phase: types_pb2.VMPhase.ValueType
    lease_id: str | None
    created_at: datetime
    updated_at: datetime

    def record(self) -> types_pb2.VMRecord:
        rec = types_pb2.VMRecord(
            uid=self.uid,
            pool_namespace=self.pool[0],
            pool_name=self.pool[1],
            flintlock_host=self.host,
            phase=self.phase,
            created_at=timestamp(self.created_at),
            updated_at=timestamp(self.updated_at),
        )
        if self.lease_id is not None:
            rec.lease_id = self.lease_id
        return rec


@dataclass
class LeaseRow:
    lease_id: str
    vm_uid: str
    pool: PoolKey
    claimed_at: datetime
    last_heartbeat_at: datetime
    expires_at: datetime
    request_id: str

    def record(self) -> types_pb2.LeaseRecord:
        return types_pb2.LeaseRecord(
            lease_id=self.lease_id,
            vm_uid=self.vm_uid,
            pool_namespace=self.pool[0],
            pool_name=self.pool[1],
            claimed_at=timestamp(self.claimed_at),
            last_heartbeat_at=timestamp(self.last_heartbeat_at),
            expires_at=timestamp(self.expires_at),
            request_id=self.request_id,
        )


@dataclass(frozen=True)
class VMCounts:
    available: int = 0
    claiming: int = 0
    leased: int = 0
    provisioning: int = 0
    quarantined: int = 0

    def status(self) -> types_pb2.PoolStatus:
        return types_pb2.PoolStatus(
            available_count=self.available,
            leased_count=self.leased + self.claiming,
            provisioning_count=self.provisioning,
            quarantined_count=self.quarantined,
        )


class Store:
    """All of the fake battery's state; durable when given `persist` (a database's save)."""

    def __init__(
        self,
        now: Callable[[], datetime],
        persist: Callable[[Store], None] | None = None,
    ) -> None:
        self._now = now
        self.pools: dict[PoolKey, types_pb2.PoolSpec] = {}
        self.vms: dict[str, VmRow] = {}
        # The same rows by Pool, in the order added: `pool_vms` is asked for on every
        # placement and every ClaimVM, and a walk over every VM made 10,000 a crawl.
        self._by_pool: dict[PoolKey, dict[str, VmRow]] = {}
        # Read-only outside this class: `add_lease` and `remove_lease` keep the indexes below.
        self.leases: dict[str, LeaseRow] = {}
        # The same Leases by Pool, by ClaimVM request id and by MicroVM: ListLeases names a
        # Pool and ClaimVM looks its request id up on every call, and at 10,000 Leases each
        # walk over all of them sat in the path of every bind.
        self._pool_leases: dict[PoolKey, dict[str, LeaseRow]] = {}
        self._request_leases: dict[str, LeaseRow] = {}
        self._vm_leases: dict[str, LeaseRow] = {}
        # Each Lease's record as ListLeases sends it, built once per change: building 1,000
        # took 17 ms of the fake's one event loop per ListLeases, copying them 1 ms.
        self._lease_records: dict[str, types_pb2.LeaseRecord] = {}
        self.events: list[types_pb2.Event] = []
        self.hosts: dict[str, HostConnection] = {}
        self.next_event_id = 1
        self._changed = asyncio.Event()
        self._persist = persist
        self._dirty = False
        self._flush_done: asyncio.Future[None] | None = None
        self._background: asyncio.TimerHandle | None = None

    def replace(
        self,
        *,
        pools: dict[PoolKey, types_pb2.PoolSpec],
        vms: dict[str, VmRow],
        leases: dict[str, LeaseRow],
        events: list[types_pb2.Event],
        next_event_id: int,
    ) -> None:
        """Take the durable state read back from a database (Hosts are the caller's)."""
        self.pools = pools
        self.vms = vms
        self._by_pool = {}
        for row in vms.values():
            self._by_pool.setdefault(row.pool, {})[row.uid] = row
        self.leases = {}
        self._pool_leases = {}
        self._request_leases = {}
        self._vm_leases = {}
        self._lease_records = {}
        for lease in leases.values():
            self._index_lease(lease)
        self.events = events
        self.next_event_id = next_event_id
        self._dirty = False
        self.touch()

    # -- change notification and durability ----------------------------------------------

    def touch(self) -> None:
        """Wake everything waiting for a change (event subscribers, test waits)."""
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def changed(self) -> asyncio.Event:
        """An event set at the next change: take it before checking, then wait on it."""
        return self._changed

    @property
    def durable(self) -> bool:
        return self._persist is not None

    def commit(self) -> None:
        """A change that one of poolmgrd's transactions would commit: wake the waiters and,
        with a database, make it durable before anyone can learn of it.

        BA-060, CL-061: the change is written (one SQLite transaction, `db.Database.save`)
        before any RPC answer leaves: the server's interceptor awaits `synced()` after every
        handler and before every streamed event, so a SIGKILL after an answer never loses what
        was answered, a ClaimVM's Lease above all. Writes are coalesced (a group commit):
        `synced()` schedules one write at the end of the event-loop turn, which every answer
        ready in that turn shares, and a change nobody waits for (provisioning, the sweep) is
        written at most BACKGROUND_WRITE_DELAY later. A write per change would cost one fsync
        per change (four per ClaimVM); tests/bench/fake_battery_db_bench.py measures both.
        Everything between two awaits is one transaction in any case (BA-005), so no write
        holds a state poolmgrd could not have committed; a crash before the write loses only
        changes nobody was told of, as a crash before COMMIT does. The write blocks the event
        loop, as poolmgrd's one database connection serialises every access.
        """
        self.touch()
        if self._persist is None:
            return
        self._dirty = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a unit test): write now
            self.flush()
            return
        if self._background is None:
            self._background = loop.call_later(BACKGROUND_WRITE_DELAY, self._write_in_background)

    def _write_in_background(self) -> None:
        self._background = None
        try:
            self.flush()
        except Exception as err:
            # Still dirty: the next `synced()` tries again and fails its RPC with INTERNAL.
            log.error("%s", err)

    def _scheduled_flush(self) -> None:
        done, self._flush_done = self._flush_done, None
        try:
            self.flush()
        except Exception as err:
            log.error("%s", err)
        finally:
            if done is not None and not done.done():
                done.set_result(None)

    async def synced(self) -> None:
        """Return once every change made so far is written; raise if writing it failed."""
        if not self._dirty and self._flush_done is None:
            return
        if self._flush_done is None:
            self._flush_done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._scheduled_flush)
        await asyncio.shield(self._flush_done)
        self.flush()

    def flush(self) -> None:
        """Write the durable state now if it changed since the last write (raises on failure)."""
        if not self._dirty or self._persist is None:
            return
        self._dirty = False
        if self._background is not None:
            self._background.cancel()
            self._background = None
        try:
            self._persist(self)
        except BaseException:
            self._dirty = True
            raise

    # -- VMs -----------------------------------------------------------------------------

    def add_vm(self, row: VmRow) -> None:
        self.vms[row.uid] = row
        self._by_pool.setdefault(row.pool, {})[row.uid] = row
        self.commit()

    def remove_vm(self, uid: str) -> VmRow | None:
        row = self.vms.pop(uid, None)
        if row is not None:
            rows = self._by_pool.get(row.pool, {})
            rows.pop(uid, None)
            if not rows:
                self._by_pool.pop(row.pool, None)
        self.commit()
        return row

    def set_phase(
        self, uid: str, phase: types_pb2.VMPhase.ValueType, *, expect: frozenset[int] | None = None
    ) -> bool:
        """Move a VM to phase; refused (False) if it is gone, DELETING, or not in expect."""
        row = self.vms.get(uid)
        if row is None or (row.phase == Phase.DELETING and phase != Phase.DELETING):
            return False
        if expect is not None and row.phase not in expect:
            return False
        row.phase = phase
        row.updated_at = self._now()
        if phase in (Phase.QUARANTINED, Phase.DELETING, Phase.AVAILABLE):
            row.lease_id = None
        self.commit()
        return True

    def pool_vms(self, key: PoolKey) -> list[VmRow]:
        return list(self._by_pool.get(key, {}).values())

    def counts(self, key: PoolKey) -> VMCounts:
        """The Pool's VMs counted by what they are doing (poolmgrd's `VMCounts`).

        One pass with each phase read once: it runs for every reconciler pass (a claim makes
        one) and every GetPool, over all of the Pool's VMs, and protobuf's enum wrapper
        resolves `Phase.X` in Python at each use (at 2,000 VMs a Pool that was most of the
        fake's time, tests/bench/operator_scale_bench.py)."""
        leases = self.leases
        by_phase: Counter[int] = Counter()
        leased = 0
        for vm in self._by_pool.get(key, {}).values():
            if vm.phase == _LEASED and vm.lease_id is not None and vm.lease_id in leases:
                leased += 1
            else:
                by_phase[vm.phase] += 1
        return VMCounts(
            available=by_phase[_AVAILABLE],
            # PRE_LEASE_HOOK_RUNNING, and LEASED with no committed lease row
            claiming=by_phase[_PRE_LEASE_HOOK_RUNNING] + by_phase[_LEASED],
            leased=leased,
            provisioning=by_phase[_PROVISIONING] + by_phase[_CREATE_HOOK_RUNNING],
            quarantined=by_phase[_QUARANTINED],
        )

    def host_vm_count(self, host: str) -> int:
        """VM rows on host in any phase, plus its placement reservations."""
        conn = self.hosts.get(host)
        rows = sum(1 for vm in self.vms.values() if vm.host == host)
        return rows + (conn.placements if conn is not None else 0)

    # -- Leases --------------------------------------------------------------------------

    def lease_for_request(self, request_id: str) -> LeaseRow | None:
        if not request_id:
            return None
        return self._request_leases.get(request_id)

    def lease_for_vm(self, uid: str) -> LeaseRow | None:
        return self._vm_leases.get(uid)

    def sorted_leases(self, key: PoolKey | None = None) -> list[LeaseRow]:
        """The Pool's Leases, or every Lease, in lease id order (ListLeases' order, BA-040)."""
        rows = self.leases if key is None else self._pool_leases.get(key, {})
        return sorted(rows.values(), key=lambda lease: lease.lease_id)

    def lease_record(self, lease: LeaseRow) -> types_pb2.LeaseRecord:
        """The Lease as ListLeases sends it; shared, so callers copy it (a response built
        from it does) and never change it."""
        record = self._lease_records.get(lease.lease_id)
        if record is None:
            record = self._lease_records[lease.lease_id] = lease.record()
        return record

    def _index_lease(self, lease: LeaseRow) -> None:
        self.leases[lease.lease_id] = lease
        self._pool_leases.setdefault(lease.pool, {})[lease.lease_id] = lease
        self._vm_leases[lease.vm_uid] = lease
        if lease.request_id:
            self._request_leases[lease.request_id] = lease

    def add_lease(self, lease: LeaseRow) -> None:
        """The Lease row and its VM's LEASED phase, in one commit (BA-004)."""
        self._index_lease(lease)
        row = self.vms[lease.vm_uid]
        row.phase = Phase.LEASED
        row.lease_id = lease.lease_id
        row.updated_at = self._now()
        self.commit()

    def renew(self, lease: LeaseRow, now: datetime, expires_at: datetime) -> None:
        lease.last_heartbeat_at = now
        lease.expires_at = expires_at
        self._lease_records.pop(lease.lease_id, None)
        self.commit()

    def remove_lease(self, lease_id: str) -> LeaseRow | None:
        lease = self.leases.pop(lease_id, None)
        self._lease_records.pop(lease_id, None)
        if lease is not None:
            rows = self._pool_leases.get(lease.pool, {})
            rows.pop(lease_id, None)
            if not rows:
                self._pool_leases.pop(lease.pool, None)
            if self._request_leases.get(lease.request_id) is lease:
                del self._request_leases[lease.request_id]
            if self._vm_leases.get(lease.vm_uid) is lease:
                del self._vm_leases[lease.vm_uid]
        self.commit()
        return lease

    # -- Pools ---------------------------------------------------------------------------

    def put_pool(self, key: PoolKey, spec: types_pb2.PoolSpec) -> None:
        self.pools[key] = spec
        self.commit()

    def delete_pool(self, key: PoolKey) -> None:
        del self.pools[key]
        self.commit()

    # -- Events --------------------------------------------------------------------------

    def emit(self, kind: types_pb2.EventType.ValueType, pool: PoolKey, vm_uid: str) -> None:
        event_id = self.next_event_id
        self.next_event_id += 1
        self.events.append(
            types_pb2.Event(
                id=event_id,
                pool_namespace=pool[0],
                pool_name=pool[1],
                vm_uid=vm_uid,
                type=kind,
                created_at=timestamp(self._now()),
            )
        )
        self.commit()
