"""The fake battery's gRPC handlers: PoolAdmin, Lease, Events and HostAdmin (TD-001, BA-*).

Status codes follow poolmgrd v0.4.0 (battery-api.md §3). Messages the spec quotes are kept
word for word; the others are our own wording.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn, TypeAlias

import grpc
from google.protobuf import empty_pb2

from battery_protos.poolmgr.v1alpha1 import (
    events_pb2,
    events_pb2_grpc,
    hostadmin_pb2,
    hostadmin_pb2_grpc,
    lease_pb2,
    lease_pb2_grpc,
    pooladmin_pb2,
    pooladmin_pb2_grpc,
    types_pb2,
)
from batteryop.testing.fake_battery.hosts import (
    FlintlockVersionError,
    HostConfig,
    HostConnection,
    HostTLSConfig,
    HostTLSFilesError,
)
from batteryop.testing.fake_battery.store import (
    LeaseRow,
    Phase,
    PoolKey,
    VmRow,
    pool_label,
    timestamp,
)
from batteryop.testing.fake_battery.validation import (
    MAX_REQUEST_ID_BYTES,
    PoolSpecInvalidError,
    missing_duration,
    validate_pool_spec,
)

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery

log = logging.getLogger(__name__)

Context: TypeAlias = grpc.aio.ServicerContext


async def _abort(context: Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


def _key(ref: types_pb2.PoolRef) -> PoolKey:
    return (ref.namespace, ref.name)


def _duration(value: object) -> timedelta:
    return value.ToTimedelta()  # type: ignore[attr-defined,no-any-return]


class PoolAdminService(pooladmin_pb2_grpc.PoolAdminServicer):
    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery

    def _pool(self, key: PoolKey) -> types_pb2.Pool:
        spec = self._b.store.pools[key]
        return types_pb2.Pool(spec=spec, status=self._b.store.counts(key).status())

    async def _validated(
        self, spec: types_pb2.PoolSpec | None, verb: str, context: Context
    ) -> types_pb2.PoolSpec:
        known = set(self._b.store.hosts) if self._b.host_api else None
        try:
            stored = validate_pool_spec(spec, known)
        except PoolSpecInvalidError as err:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(err))
        missing = missing_duration(stored)
        if missing is not None:
            await _abort(
                context, grpc.StatusCode.INTERNAL, f"{verb} pool: store: {missing} is required"
            )
        return stored

    async def CreatePool(
        self, request: pooladmin_pb2.CreatePoolRequest, context: Context
    ) -> types_pb2.Pool:
        spec = request.spec if request.HasField("spec") else None
        stored = await self._validated(spec, "create", context)
        key = (stored.namespace, stored.name)
        async with self._b.pool_lock(key):
            if key in self._b.store.pools:
                await _abort(
                    context,
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"pool {pool_label(key)} already exists",
                )
            self._b.store.put_pool(key, stored)
            self._b.schedule.start_reconciler(key, stored)
            return types_pb2.Pool(spec=stored, status=types_pb2.PoolStatus())

    async def UpdatePool(
        self, request: pooladmin_pb2.UpdatePoolRequest, context: Context
    ) -> types_pb2.Pool:
        spec = request.spec if request.HasField("spec") else None
        stored = await self._validated(spec, "update", context)
        key = (stored.namespace, stored.name)
        async with self._b.pool_lock(key):
            if key not in self._b.store.pools:
                await _abort(
                    context, grpc.StatusCode.NOT_FOUND, f"pool {pool_label(key)} not found"
                )
            self._b.store.put_pool(key, stored)
            # BA-074: the old reconciler's cancelled provisions get the old spec's policy.
            self._b.schedule.start_reconciler(key, stored)
            return self._pool(key)

    async def DeletePool(
        self, request: pooladmin_pb2.DeletePoolRequest, context: Context
    ) -> empty_pb2.Empty:
        b = self._b
        store = b.store
        key = _key(request.ref)
        async with b.pool_lock(key):
            # BA-071: deleting a Pool battery does not know is NOT_FOUND.
            if key not in store.pools:
                await _abort(
                    context, grpc.StatusCode.NOT_FOUND, f"pool {pool_label(key)} not found"
                )

            def leased() -> int:
                return sum(
                    1
                    for vm in store.pool_vms(key)
                    if vm.phase in (Phase.LEASED, Phase.PRE_LEASE_HOOK_RUNNING)
                )

            # BA-070: without force, a leased or pre-lease MicroVM refuses the delete, changing
            # nothing.
            if not request.force and (n := leased()):
                await _abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"pool {pool_label(key)} has {n} leased VMs, release them or delete with force",
                )
            spec = store.pools[key]
            try:
                await b.schedule.stop_reconciler(key)
            except asyncio.CancelledError:
                b.schedule.start_reconciler(key, spec)
                raise
            if not request.force and (n := leased()):
                b.schedule.start_reconciler(key, spec)
                await _abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"pool {pool_label(key)} has {n} leased VMs, release them or delete with force",
                )
            # One "transaction": the Pool row, its VMs to DELETING, its Leases.
            # BA-103: the Pool and its Leases go at once (leased ones too under force, BA-104),
            # then its MicroVMs are drained through flintlockd.
            store.delete_pool(key)
            vms = store.pool_vms(key)
            for vm in vms:
                store.set_phase(vm.uid, Phase.DELETING)
            for lease in store.sorted_leases(key):
                store.remove_lease(lease.lease_id)
            await asyncio.shield(self._drain(key, vms))
            return empty_pb2.Empty()

    async def _drain(self, key: PoolKey, vms: list[VmRow]) -> None:
        for vm in vms:
            self._b.store.emit(types_pb2.VM_DELETED_ON_POOL_DELETE, key, vm.uid)
        done = await asyncio.gather(*(self._b.deleter.delete_on_host(vm) for vm in vms))
        for vm, ok in zip(vms, done, strict=True):
            if ok:
                self._b.store.remove_vm(vm.uid)

    async def GetPool(
        self, request: pooladmin_pb2.GetPoolRequest, context: Context
    ) -> types_pb2.Pool:
        key = _key(request.ref)
        if key not in self._b.store.pools:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"pool {pool_label(key)} not found")
        return self._pool(key)

    async def ListPools(
        self, request: pooladmin_pb2.ListPoolsRequest, context: Context
    ) -> pooladmin_pb2.ListPoolsResponse:
        keys = sorted(self._b.store.pools)
        if request.HasField("namespace"):
            keys = [k for k in keys if k[0] == request.namespace]
        return pooladmin_pb2.ListPoolsResponse(pools=[self._pool(k) for k in keys])


class LeaseService(lease_pb2_grpc.LeaseServicer):
    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery

    async def ClaimVM(
        self, request: lease_pb2.ClaimVMRequest, context: Context
    ) -> lease_pb2.ClaimVMResponse:
        b = self._b
        store = b.store
        faults = b.faults
        if faults.claim_delay > 0 and not faults.claim_delay_after_commit:
            await asyncio.sleep(faults.claim_delay)
        rid = request.request_id
        # BA-102: a request_id over 255 bytes is refused.
        if len(rid.encode()) > MAX_REQUEST_ID_BYTES:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request_id is longer than {MAX_REQUEST_ID_BYTES} bytes",
            )
        key = _key(request.pool)
        # BA-002: a claim on an unknown Pool is NOT_FOUND.
        if key not in store.pools:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"pool {pool_label(key)} not found")
        # BA-100: a repeated request_id gets its live Lease back, neither renewed nor doubled.
        if rid and (previous := store.lease_for_request(rid)) is not None:
            return await self._answer(previous, key, context)

        available = Phase.AVAILABLE
        vm = next((v for v in store.pool_vms(key) if v.phase == available), None)
        # BA-005: picking the MicroVM and moving it out of AVAILABLE are one step; BA-001: none left
        # means RESOURCE_EXHAUSTED and no Lease (TD-003).
        if vm is None or not store.set_phase(
            vm.uid, Phase.LEASED, expect=frozenset({Phase.AVAILABLE})
        ):
            await _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"no available vm in pool {pool_label(key)}",
            )
        spec = store.pools[key]
        host = store.hosts.get(vm.host)
        store.set_phase(vm.uid, Phase.PRE_LEASE_HOOK_RUNNING)
        try:
            if host is None:
                failure: str | None = f"host {vm.host} is not registered"
            else:
                failure = await b.provisioner.run_hook(
                    vm, host, spec.pre_lease_commands, "pre_lease"
                )
        except asyncio.CancelledError:
            if not b.crashing:
                await asyncio.shield(b.provisioner.hook_failed(vm, spec, "claim cancelled"))
            raise
        if failure is not None:
            await asyncio.shield(b.provisioner.hook_failed(vm, spec, failure))
            await _abort(context, grpc.StatusCode.INTERNAL, f"pre-lease hook: {failure}")

        # Commit: the Lease row and the VM's LEASED phase together.
        row = store.vms.get(vm.uid)
        current = store.pools.get(key)
        if row is None or row.phase != Phase.PRE_LEASE_HOOK_RUNNING or current is None:
            await _abort(
                context,
                grpc.StatusCode.ABORTED,
                f"vm {vm.uid} was deleted during the claim, retry",
            )
        if rid and (winner := store.lease_for_request(rid)) is not None:
            store.set_phase(vm.uid, Phase.AVAILABLE)
            return await self._answer(winner, key, context)
        # BA-003: a new Lease gets a random UUID and expires the Pool's threshold after the claim.
        now = b.clock.now()
        lease = LeaseRow(
            lease_id=str(uuid.uuid4()),
            vm_uid=vm.uid,
            pool=key,
            claimed_at=now,
            last_heartbeat_at=now,
            expires_at=now + _duration(current.heartbeat_expiry_threshold),
            request_id=rid,
        )
        store.add_lease(lease)
        # BA-004: from here the Lease is committed and the claim answers success.
        store.emit(types_pb2.VM_CLAIMED, key, vm.uid)
        try:
            return await self._answer(lease, key, context)
        finally:
            # The Pool's reconciler tops up once the answer is on its way. poolmgrd's runs
            # beside its RPCs; in this one event loop its pass, over every MicroVM of the
            # Pool, and the CreateMicroVM it starts would hold the answer back (its
            # GetMicroVM awaits meanwhile): 3.4 ms of ClaimVM at 2,000 MicroVMs a Pool.
            b.schedule.notify(key, "claimed")

    async def _answer(
        self, lease: LeaseRow, key: PoolKey, context: Context
    ) -> lease_pb2.ClaimVMResponse:
        """The answer for an existing Lease: fresh, or replayed for its request_id."""
        b = self._b
        # BA-102: a request_id already used on another Pool is refused.
        if lease.pool != key:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request_id {lease.request_id!r} was used for a claim on pool "
                f"{pool_label(lease.pool)}, not {pool_label(key)}",
            )
        vm = b.store.vms.get(lease.vm_uid)
        # BA-101: a replay whose MicroVM is being deleted is ABORTED; once the Lease is gone the
        # request_id claims afresh.
        if vm is None or vm.phase == Phase.DELETING:
            await _abort(
                context,
                grpc.StatusCode.ABORTED,
                f"lease {lease.lease_id} for request_id {lease.request_id!r} is being released, "
                "retry",
            )
        if b.faults.claim_delay > 0 and b.faults.claim_delay_after_commit:
            await asyncio.sleep(b.faults.claim_delay)
        lost = b.faults.take_lost_claim_answer()
        if lost is not None:
            await _abort(context, lost, "the answer was lost (fault injection)")
        reply = lease_pb2.ClaimVMResponse(lease_id=lease.lease_id, vm_uid=vm.uid)
        host = b.store.hosts.get(vm.host)
        if host is not None:
            reply.host.name = host.name
            reply.host.address = host.address
            try:
                got = await host.get(vm.uid, b.timings.rpc_timeout)
                for name, status in got.status.network_interfaces.items():
                    reply.network_interfaces[name].CopyFrom(status)
            except grpc.aio.AioRpcError as err:
                log.warning("vm %s: GetMicroVM for the claim answer: %s", vm.uid, err.code().name)
        return reply

    async def Heartbeat(
        self, request: lease_pb2.HeartbeatRequest, context: Context
    ) -> lease_pb2.HeartbeatResponse:
        b = self._b
        if b.faults.heartbeat_refusal is not None:
            await _abort(context, b.faults.heartbeat_refusal, "heartbeat refused (fault injection)")
        lease = b.store.leases.get(request.lease_id)
        # BA-011: a heartbeat for a Lease battery does not hold is NOT_FOUND.
        if lease is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"lease {request.lease_id} not found")
        spec = b.store.pools.get(lease.pool)
        if spec is None:
            await _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"pool {pool_label(lease.pool)} of lease {lease.lease_id} not found",
            )
        now = b.clock.now()
        # BA-010: a heartbeat pushes the expiry out from now, even past an expiry already gone by.
        b.store.renew(lease, now, now + _duration(spec.heartbeat_expiry_threshold))
        return lease_pb2.HeartbeatResponse(expires_at=timestamp(lease.expires_at))

    async def ReleaseVM(
        self, request: lease_pb2.ReleaseVMRequest, context: Context
    ) -> empty_pb2.Empty:
        b = self._b
        store = b.store
        lease = store.leases.get(request.lease_id)
        # BA-032: releasing a Lease battery does not hold is NOT_FOUND.
        if lease is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"lease {request.lease_id} not found")
        vm = store.vms.get(lease.vm_uid)
        if vm is None:
            store.remove_lease(lease.lease_id)
            return empty_pb2.Empty()
        confirmed = await asyncio.shield(b.deleter.delete_on_host(vm))
        # BA-031: flintlockd did not confirm: UNAVAILABLE, the Lease stays, the sweep retries.
        if not confirmed:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "vm cleanup pending, retry later")
        # BA-030, BA-051: only once flintlockd confirmed do the Lease, MicroVM and event go.
        removed = store.remove_vm(vm.uid) is not None
        store.remove_lease(lease.lease_id)
        if removed:
            store.emit(types_pb2.VM_DELETED_ON_RELEASE, vm.pool, vm.uid)
            b.schedule.notify(vm.pool, "deleted")
        return empty_pb2.Empty()

    async def ListLeases(
        self, request: lease_pb2.ListLeasesRequest, context: Context
    ) -> lease_pb2.ListLeasesResponse:
        # BA-040, BA-041: every Lease as stored, expired-but-unswept ones included, none renewed.
        store = self._b.store
        pool = _key(request.pool_ref) if request.HasField("pool_ref") else None
        leases = store.sorted_leases(pool)
        return lease_pb2.ListLeasesResponse(leases=[store.lease_record(lease) for lease in leases])


class EventsService(events_pb2_grpc.EventsServicer):
    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery

    async def Subscribe(
        self, request: events_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[types_pb2.Event]:
        b = self._b
        if b.faults.refuse_event_streams:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "events stream refused (fault)")
        key = _key(request.pool) if request.HasField("pool") else None
        generation = b.stream_generation
        sent = 0
        while True:
            changed = b.store.changed
            events = b.store.events
            # BA-050: the whole outbox first (one Pool's or all), then each event as it is recorded.
            while sent < len(events):
                event = events[sent]
                sent += 1
                if key is None or (event.pool_namespace, event.pool_name) == key:
                    yield event
            if b.stream_generation != generation:
                await _abort(context, grpc.StatusCode.UNAVAILABLE, "events stream dropped (fault)")
            if sent == len(b.store.events):
                await changed.wait()


class HostAdminService(hostadmin_pb2_grpc.HostAdminServicer):
    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery

    def _host(self, conn: HostConnection) -> types_pb2.Host:
        host = types_pb2.Host(
            name=conn.name,
            address=conn.address,
            cordoned=conn.cordoned,
            cordoned_reason=conn.cordoned_reason,
            updated_at=timestamp(conn.updated_at),
        )
        if conn.cordoned_at is not None:
            host.cordoned_at.CopyFrom(timestamp(conn.cordoned_at))
        if self._b.host_api:
            tls = conn.config.tls
            host.tls.CopyFrom(
                types_pb2.HostTLS(
                    insecure=tls.insecure,
                    ca_file=tls.ca_file,
                    cert_file=tls.cert_file,
                    key_file=tls.key_file,
                )
            )
        return host

    def _status(self, conn: HostConnection) -> hostadmin_pb2.HostStatus:
        return hostadmin_pb2.HostStatus(
            host=self._host(conn),
            vm_count=self._b.store.host_vm_count(conn.name),
            flintlock_version=conn.flintlock_version,
        )

    async def _registered(
        self, name: str, context: Context, missing: grpc.StatusCode
    ) -> HostConnection:
        if not name:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "host name is required")
        conn = self._b.store.hosts.get(name)
        if conn is None:
            if missing == grpc.StatusCode.FAILED_PRECONDITION:
                await _abort(context, missing, f"host {name} is not registered")
            await _abort(context, missing, f"host {name} not found")
        return conn

    async def _main_only(self, method: str, context: Context) -> None:
        # BA-108: v0.4.0 answers AddHost, UpdateHost, RemoveHost and GetHost with UNIMPLEMENTED.
        if not self._b.host_api:
            await _abort(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                f"unknown method {method} for service poolmgr.v1alpha1.HostAdmin",
            )

    async def CordonHost(
        self, request: hostadmin_pb2.CordonHostRequest, context: Context
    ) -> types_pb2.Host:
        # BA-106: an unknown Host is FAILED_PRECONDITION, an empty name INVALID_ARGUMENT.
        conn = await self._registered(request.name, context, grpc.StatusCode.FAILED_PRECONDITION)
        now = self._b.clock.now()
        conn.cordoned = True
        conn.cordoned_reason = request.reason
        conn.cordoned_at = now
        conn.updated_at = now
        self._b.store.commit()
        return self._host(conn)

    async def UncordonHost(
        self, request: hostadmin_pb2.UncordonHostRequest, context: Context
    ) -> types_pb2.Host:
        conn = await self._registered(request.name, context, grpc.StatusCode.FAILED_PRECONDITION)
        if conn.cordoned or conn.cordoned_at is not None or conn.cordoned_reason:
            conn.updated_at = self._b.clock.now()
        conn.cordoned = False
        conn.cordoned_reason = ""
        conn.cordoned_at = None
        self._b.store.commit()
        return self._host(conn)

    async def ListHosts(
        self, request: hostadmin_pb2.ListHostsRequest, context: Context
    ) -> hostadmin_pb2.ListHostsResponse:
        # BA-107: every Host by name, with its cordon state, MicroVM count and flintlockd version.
        hosts = sorted(self._b.store.hosts.values(), key=lambda conn: conn.name)
        return hostadmin_pb2.ListHostsResponse(hosts=[self._status(c) for c in hosts])

    async def GetHost(
        self, request: hostadmin_pb2.GetHostRequest, context: Context
    ) -> hostadmin_pb2.HostStatus:
        await self._main_only("GetHost", context)
        conn = await self._registered(request.name, context, grpc.StatusCode.NOT_FOUND)
        return self._status(conn)

    async def _connect(
        self, host: types_pb2.Host, skip_validation: bool, context: Context
    ) -> HostConnection:
        """Validate a Host spec and dial it (checking its version unless skipped)."""
        if not host.name:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "host name is required")
        if not host.address:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "host address is required")
        tls = HostTLSConfig(
            insecure=host.tls.insecure,
            ca_file=host.tls.ca_file,
            cert_file=host.tls.cert_file,
            key_file=host.tls.key_file,
        )
        problem = tls.problem()
        if problem is not None:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"host {host.name}: {problem}")
        conn = HostConnection(HostConfig(host.name, host.address, tls), self._b.clock.now())
        try:
            conn.dial()
        except HostTLSFilesError as err:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
        if not skip_validation:
            try:
                await conn.check_version(self._b.timings.version_check_timeout)
            except FlintlockVersionError as err:
                await conn.close()
                await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
            conn.version_checked = True
        return conn

    async def AddHost(
        self, request: hostadmin_pb2.AddHostRequest, context: Context
    ) -> types_pb2.Host:
        await self._main_only("AddHost", context)
        store = self._b.store
        if request.host.name in store.hosts:
            await _abort(
                context,
                grpc.StatusCode.ALREADY_EXISTS,
                f"host {request.host.name} already exists",
            )
        conn = await self._connect(request.host, request.skip_validation, context)
        if conn.name in store.hosts:
            await conn.close()
            await _abort(
                context, grpc.StatusCode.ALREADY_EXISTS, f"host {conn.name} already exists"
            )
        store.hosts[conn.name] = conn
        store.commit()
        return self._host(conn)

    async def UpdateHost(
        self, request: hostadmin_pb2.UpdateHostRequest, context: Context
    ) -> types_pb2.Host:
        await self._main_only("UpdateHost", context)
        store = self._b.store
        if request.host.name not in store.hosts:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"host {request.host.name} not found")
        conn = await self._connect(request.host, request.skip_validation, context)
        old = store.hosts.get(conn.name)
        if old is None:
            await conn.close()
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"host {conn.name} not found")
        conn.cordoned = old.cordoned
        conn.cordoned_reason = old.cordoned_reason
        conn.cordoned_at = old.cordoned_at
        conn.placements = old.placements
        if request.skip_validation:
            conn.flintlock_version = ""
        store.hosts[conn.name] = conn
        store.commit()
        await old.close()
        return self._host(conn)

    async def RemoveHost(
        self, request: hostadmin_pb2.RemoveHostRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._main_only("RemoveHost", context)
        store = self._b.store
        conn = await self._registered(request.name, context, grpc.StatusCode.NOT_FOUND)
        pools = sorted(
            pool_label(key)
            for key, spec in store.pools.items()
            if conn.name in spec.flintlock_hosts
        )
        count = store.host_vm_count(conn.name)
        if pools or count:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"host {conn.name} is still in use: pools {pools}, vm_count {count}",
            )
        del store.hosts[conn.name]
        store.commit()
        await conn.close()
        return empty_pb2.Empty()
