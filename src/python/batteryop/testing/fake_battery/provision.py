"""How the fake battery places and provisions MicroVMs, and applies hook failures (TD-002).

`Provisioner` picks a Host for each MicroVM a reconciler asks for, creates it through that
Host's flintlockd, waits for it and its guest agent, runs the create hook and makes it
AVAILABLE, or applies the Pool's hook-failure policy (also for ClaimVM's pre-lease hook).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import grpc

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import types_pb2
from batteryop.api._compat import within
from batteryop.testing.fake_battery.hosts import FlintlockVersionError, HostConnection
from batteryop.testing.fake_battery.store import Phase, PoolKey, VmRow, pool_label

if TYPE_CHECKING:
    from batteryop.testing.fake_battery.battery import FakeBattery
    from batteryop.testing.fake_battery.loops import Reconciler

log = logging.getLogger(__name__)

Policy = types_pb2.HookFailurePolicy
VmState = microvm_pb2.MicroVMStatus.MicroVMState

_GOING = frozenset({Phase.DELETING, Phase.FAILED})
"""Phases of VMs that no longer count as placed on their Host (`Provisioner.placed`)."""


class Provisioner:
    """Placement, provisioning and hook failures for one FakeBattery."""

    def __init__(self, battery: FakeBattery) -> None:
        self._b = battery

    def placed(self, key: PoolKey) -> Counter[str]:
        """The Pool's MicroVMs per Host, but those going or failed."""
        return Counter(vm.host for vm in self._b.store.pool_vms(key) if vm.phase not in _GOING)

    def pick_host(
        self, spec: types_pb2.PoolSpec, placed: Mapping[str, int], pending: Mapping[str, int]
    ) -> HostConnection | None:
        """The eligible Host with the fewest of the Pool's MicroVMs, placed or on the way."""
        best: HostConnection | None = None
        best_load = 0
        for name in spec.flintlock_hosts:
            host = self._b.store.hosts.get(name)
            # BA-105: a cordoned Host gets no new MicroVM; those already there keep running.
            if host is None or host.cordoned:
                continue
            load = pending.get(name, 0) + placed.get(name, 0)
            if best is None or load < best_load:
                best, best_load = host, load
        return best

    async def provision(
        self, rec: Reconciler, host: HostConnection, spec: types_pb2.PoolSpec
    ) -> None:
        key = rec.key
        reserved = True

        def unreserve() -> None:
            nonlocal reserved
            if reserved:
                reserved = False
                host.placements -= 1
                rec.pending[host.name] -= 1

        vm: VmRow | None = None
        try:
            # BA-110: no MicroVM on a Host whose flintlockd is older than v0.15.2.
            await host.ensure_version(self._b.timings.version_check_timeout)
            template = microvm_pb2.MicroVMSpec()
            template.CopyFrom(spec.microvm_template)
            template.allow_guest_agent = True
            template.id = f"{key[1]}-{uuid.uuid4().hex[:8]}"
            if not template.namespace:
                template.namespace = key[0]
            # TD-002: a MicroVM exists only once the Host's flintlockd has created it.
            created = await host.create(template, self._b.timings.rpc_timeout)
            now = self._b.clock.now()
            vm = VmRow(
                uid=created.spec.uid,
                flintlock_id=template.id,
                pool=key,
                host=host.name,
                phase=Phase.PROVISIONING,
                lease_id=None,
                created_at=now,
                updated_at=now,
            )
            unreserve()
            self._b.store.add_vm(vm)
            self._b.store.emit(types_pb2.VM_PROVISIONED, key, vm.uid)
            failure = await self._bring_up(vm, host, spec)
            if failure is None:
                # BA-006: AVAILABLE only once provisioning and the create hook have completed.
                if self._b.store.set_phase(
                    vm.uid, Phase.AVAILABLE, expect=frozenset({Phase.CREATE_HOOK_RUNNING})
                ):
                    self._b.store.emit(types_pb2.VM_AVAILABLE, key, vm.uid)
                return
            log.warning("pool %s: vm %s create hook failed: %s", pool_label(key), vm.uid, failure)
            await asyncio.shield(self.hook_failed(vm, spec, failure))
        except asyncio.CancelledError:
            if vm is not None and not self._b.crashing:
                await asyncio.shield(self.hook_failed(vm, spec, "provision cancelled"))
            raise
        except (grpc.aio.AioRpcError, FlintlockVersionError) as err:
            log.warning("pool %s: provision on %s failed: %s", pool_label(key), host.name, err)
        finally:
            unreserve()

    async def _bring_up(
        self, vm: VmRow, host: HostConnection, spec: types_pb2.PoolSpec
    ) -> str | None:
        """Wait for CREATED and the guest agent, run the create hook; None, or why it failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._b.timings.create_timeout
        while True:
            try:
                got = await host.get(vm.uid, self._b.timings.rpc_timeout)
                if got.status.state == VmState.CREATED:
                    break
                if got.status.state == VmState.FAILED:
                    return "flintlock reports the microvm FAILED"
            except grpc.aio.AioRpcError as err:
                log.debug("vm %s: GetMicroVM: %s", vm.uid, err.code().name)
            if loop.time() >= deadline:
                return "timed out waiting for the microvm to be created"
            await asyncio.sleep(self._b.timings.create_poll_interval)
        if not self._b.store.set_phase(
            vm.uid, Phase.CREATE_HOOK_RUNNING, expect=frozenset({Phase.PROVISIONING})
        ):
            return None
        deadline = loop.time() + self._b.timings.agent_timeout
        while True:
            probe = await host.exec_shell(vm.uid, "true", self._b.timings.agent_probe_timeout)
            if not probe.rpc_failed:
                break
            if loop.time() >= deadline:
                return f"guest agent not ready: {probe.describe()}"
            await asyncio.sleep(self._b.timings.agent_poll_interval)
        return await self.run_hook(vm, host, spec.create_commands, "create")

    async def run_hook(
        self, vm: VmRow, host: HostConnection, commands: Sequence[str], kind: str
    ) -> str | None:
        if self._b.faults.take_hook_failure(kind):
            return f"{kind} hook failed (fault injection)"
        for command in commands:
            result = await host.exec_shell(vm.uid, command, None)
            if not result.ok:
                return f"command {command!r}: {result.describe()}"
        return None

    async def hook_failed(self, vm: VmRow, spec: types_pb2.PoolSpec, why: str) -> None:
        """Apply the Pool's hook-failure policy to vm (detached from the caller, bounded)."""
        row = self._b.store.vms.get(vm.uid)
        if row is None or row.phase == Phase.DELETING:
            return
        if spec.hook_failure_policy == Policy.QUARANTINE:
            self._b.store.set_phase(vm.uid, Phase.QUARANTINED)
        else:
            host = self._b.store.hosts.get(vm.host)
            if host is not None:
                try:
                    await within(
                        host.delete(vm.uid, self._b.timings.delete_timeout),
                        self._b.timings.hook_cleanup_timeout,
                    )
                except (grpc.aio.AioRpcError, TimeoutError) as err:
                    # BA-113: as poolmgrd v0.4.0 does (battery #131/#132), the row goes anyway.
                    log.warning("vm %s: best-effort delete after hook failure: %s", vm.uid, err)
            self._b.store.remove_vm(vm.uid)
            self._b.schedule.notify(vm.pool, "deleted")
        self._b.store.emit(types_pb2.VM_HOOK_FAILED, vm.pool, vm.uid)
        log.info(
            "vm %s: hook failed (%s); policy %s applied",
            vm.uid,
            why,
            Policy.Name(spec.hook_failure_policy),
        )
