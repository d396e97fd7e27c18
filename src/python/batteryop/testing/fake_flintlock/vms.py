"""The fake flintlockd's in-memory MicroVMs: spec checks, identity, state and sandboxes (TD-010).

A `VmStore` holds every MicroVM of one fake Host by uid. Create checks and normalises the spec as
flintlockd does (defaults, ranges, required parts; flintlock-api.md §1.3), gives the MicroVM a
fresh ULID and stores it PENDING, and the Host's `Guests` backend (guests.py) starts its guest
and moves it to CREATED once the guest is ready (the "reconciler"); a guest that dies removes
its MicroVM. Delete marks it DELETING, stops the guest, and a timer removes it. Each MicroVM owns a sandbox directory under the state
dir, laid out like flintlockd's (`vm/<namespace>/<name>/<uid>/`), whose `rootfs/` stands in for
the guest's filesystem root when commands run in it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import timestamp_pb2

from battery_protos.flintlock.types import microvm_pb2

if TYPE_CHECKING:
    from batteryop.testing.fake_flintlock.guests import Guests

from batteryop.api.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

State = microvm_pb2.MicroVMStatus.MicroVMState

DEFAULT_NAMESPACE = "default"
DEFAULT_VCPU = 2
DEFAULT_MEMORY_MB = 1024
VCPU_RANGE = (1, 64)
MEMORY_RANGE_MB = (1024, 32768)
PROVIDERS = ("firecracker", "cloudhypervisor")
GUEST_AGENT_VSOCK_NAME = "guest-agent.vsock"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class SpecInvalidError(ValueError):
    """A MicroVMSpec that flintlockd would refuse; the message names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid microvm spec: {field}: {problem}")
        self.field = field


class VmNotFoundError(LookupError):
    """No MicroVM has this uid."""

    def __init__(self, uid: str) -> None:
        super().__init__(f"microvm with uid {uid} not found")
        self.uid = uid


def new_ulid() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, Crockford base32, 26 chars."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def _sanitize_image(ref: str) -> str:
    """flintlockd strips whitespace and control characters from image references."""
    return "".join(c for c in ref if c.isprintable() and not c.isspace())


def _check_path_part(field: str, value: str) -> None:
    if not value:
        raise SpecInvalidError(field, "is required")
    if "/" in value or "\x00" in value or value in (".", ".."):
        raise SpecInvalidError(field, f"{value!r} may not contain '/' or be '.' or '..'")


def _check_volume(field: str, volume: microvm_pb2.Volume, *, root: bool) -> None:
    if not volume.id:
        raise SpecInvalidError(f"{field}.id", "is required")
    source = volume.source
    if source.HasField("virtiofs_source"):
        if root:
            raise SpecInvalidError(f"{field}.source", "the root volume may not be virtiofs")
        return
    if not source.HasField("container_source") or not source.container_source.strip():
        raise SpecInvalidError(f"{field}.source.container_source", "is required")
    source.container_source = _sanitize_image(source.container_source)


def normalise_spec(spec: microvm_pb2.MicroVMSpec, default_provider: str) -> None:
    """Check spec and apply flintlockd's defaults in place; raise SpecInvalidError if refused."""
    _check_path_part("id", spec.id)
    if not spec.namespace:
        spec.namespace = DEFAULT_NAMESPACE
    _check_path_part("namespace", spec.namespace)
    if spec.vcpu == 0:
        spec.vcpu = DEFAULT_VCPU
    if not VCPU_RANGE[0] <= spec.vcpu <= VCPU_RANGE[1]:
        raise SpecInvalidError("vcpu", f"{spec.vcpu} is outside {VCPU_RANGE[0]}..{VCPU_RANGE[1]}")
    if spec.memory_in_mb == 0:
        spec.memory_in_mb = DEFAULT_MEMORY_MB
    low, high = MEMORY_RANGE_MB
    if not low <= spec.memory_in_mb <= high:
        raise SpecInvalidError("memory_in_mb", f"{spec.memory_in_mb} is outside {low}..{high}")
    provider = spec.provider if spec.HasField("provider") and spec.provider else default_provider
    if provider not in PROVIDERS:
        raise SpecInvalidError("provider", f"unknown provider {provider!r}")
    spec.provider = provider

    if not spec.HasField("kernel") or not spec.kernel.image.strip():
        raise SpecInvalidError("kernel.image", "is required")
    spec.kernel.image = _sanitize_image(spec.kernel.image)
    if not spec.kernel.filename:
        raise SpecInvalidError("kernel.filename", "is required")
    if spec.HasField("initrd"):
        if not spec.initrd.image.strip():
            raise SpecInvalidError("initrd.image", "is required when initrd is set")
        spec.initrd.image = _sanitize_image(spec.initrd.image)

    if not spec.HasField("root_volume"):
        raise SpecInvalidError("root_volume", "is required")
    _check_volume("root_volume", spec.root_volume, root=True)
    virtiofs = 0
    for i, volume in enumerate(spec.additional_volumes):
        _check_volume(f"additional_volumes[{i}]", volume, root=False)
        virtiofs += volume.source.HasField("virtiofs_source")
    if virtiofs > 1:
        raise SpecInvalidError("additional_volumes", "at most one virtiofs volume is allowed")
    if virtiofs and provider == "firecracker":
        raise SpecInvalidError("additional_volumes", "virtiofs needs the cloudhypervisor provider")

    if not spec.interfaces:
        raise SpecInvalidError("interfaces", "at least one network interface is required")
    for i, iface in enumerate(spec.interfaces):
        field = f"interfaces[{i}]"
        if not iface.device_id:
            raise SpecInvalidError(f"{field}.device_id", "is required")
        if "/" in iface.device_id or "@" in iface.device_id:
            raise SpecInvalidError(f"{field}.device_id", "may not contain '/' or '@'")
        if iface.type == microvm_pb2.NetworkInterface.MACVTAP and provider == "firecracker":
            raise SpecInvalidError(
                f"{field}.type", "the firecracker provider does not support macvtap"
            )
        if iface.HasField("overrides") and not iface.overrides.HasField("bridge_name"):
            # flintlockd dereferences bridge_name unchecked here (and would crash).
            raise SpecInvalidError(f"{field}.overrides.bridge_name", "is required with overrides")
    # flintlockd does not copy labels into its model, so they never come back.
    spec.ClearField("labels")


def _random_mac() -> str:
    octets = [0xAA, 0xFF] + [secrets.randbelow(256) for _ in range(4)]
    return ":".join(f"{o:02x}" for o in octets)


@dataclass
class VmRecord:
    """One MicroVM: what flintlockd reports, plus the fake's sandbox."""

    vm: microvm_pb2.MicroVM
    directory: Path
    created_monotonic: float | None = None

    @property
    def uid(self) -> str:
        return self.vm.spec.uid

    @property
    def rootfs(self) -> Path:
        """The directory standing in for the guest's `/`."""
        return self.directory / "rootfs"

    @property
    def state(self) -> State.ValueType:
        return self.vm.status.state


class VmStore:
    """All MicroVMs of one fake Host, keyed by uid, in creation order."""

    def __init__(
        self,
        state_dir: Path,
        guests: Guests,
        *,
        delete_delay: float = 0.0,
        default_provider: str = "firecracker",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._state_dir = state_dir
        self._guests = guests
        self._delete_delay = delete_delay
        self._default_provider = default_provider
        self._clock = clock
        self._vms: dict[str, VmRecord] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    def create(self, spec: microvm_pb2.MicroVMSpec) -> microvm_pb2.MicroVM:
        """Store a checked copy of spec as PENDING and schedule its move to CREATED."""
        spec = microvm_pb2.MicroVMSpec.FromString(spec.SerializeToString())
        normalise_spec(spec, self._default_provider)
        uid = new_ulid()
        spec.uid = uid
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        spec.created_at.CopyFrom(now)
        spec.updated_at.CopyFrom(now)
        spec.ClearField("deleted_at")
        directory = self._state_dir / "vm" / spec.namespace / spec.id / uid
        (directory / "rootfs" / "tmp").mkdir(parents=True)
        (directory / "rootfs" / "root").mkdir()
        vm = microvm_pb2.MicroVM(version=1, spec=spec)
        vm.status.state = State.PENDING
        if spec.allow_guest_agent:
            vm.status.vsock_path = str(directory / GUEST_AGENT_VSOCK_NAME)
        record = VmRecord(vm=vm, directory=directory)
        self._vms[uid] = record
        self._guests.start(record, ready=partial(self._boot, uid), gone=partial(self._vanish, uid))
        return self._copy(vm)

    def get(self, uid: str) -> microvm_pb2.MicroVM:
        return self._copy(self.record(uid).vm)

    def record(self, uid: str) -> VmRecord:
        try:
            return self._vms[uid]
        except KeyError:
            raise VmNotFoundError(uid) from None

    def list(self, namespace: str = "", name: str | None = None) -> list[microvm_pb2.MicroVM]:
        """MicroVMs in namespace (every namespace when empty), named name when given."""
        return [
            self._copy(r.vm)
            for r in self._vms.values()
            if (not namespace or r.vm.spec.namespace == namespace)
            and (name is None or r.vm.spec.id == name)
        ]

    def delete(self, uid: str) -> None:
        """Mark the MicroVM DELETING and schedule its removal."""
        record = self.record(uid)
        if record.state != State.DELETING:
            self._set_state(record, State.DELETING)
            record.vm.spec.deleted_at.GetCurrentTime()
            self._guests.stop(record)
        self._later(self._delete_delay, self._remove, uid)

    def set_state(self, uid: str, state: State.ValueType) -> microvm_pb2.MicroVM:
        """Force a state (fault injection), e.g. FAILED, or PENDING to model a VM not running."""
        record = self.record(uid)
        if state == State.CREATED and record.state == State.PENDING:
            self._boot(uid)
        else:
            self._set_state(record, state)
        return self._copy(record.vm)

    def agent_up_for(self, record: VmRecord) -> float:
        """Seconds since the MicroVM became CREATED (0 when it is not)."""
        if record.created_monotonic is None:
            return 0.0
        return self._clock.monotonic() - record.created_monotonic

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def _later(self, delay: float, callback: Callable[[str], None], uid: str) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            callback(uid)

        handle = loop.call_later(max(delay, 0.0), fire)
        self._timers.add(handle)

    def _boot(self, uid: str) -> None:
        record = self._vms.get(uid)
        if record is None or record.state != State.PENDING:
            return
        for index, iface in enumerate(record.vm.spec.interfaces):
            status = record.vm.status.network_interfaces[iface.device_id]
            status.host_device_name = ("fltap" if iface.type else "flvtap") + secrets.token_hex(3)
            status.index = 100 + index
            status.mac_address = _random_mac()
        self._set_state(record, State.CREATED)

    def _vanish(self, uid: str) -> None:
        """The guest died by itself (its VMM process was killed): the MicroVM is gone."""
        record = self._vms.get(uid)
        if record is None or record.state == State.DELETING:
            return
        log.warning("microvm %s/%s (%s): its guest died; gone", record.vm.spec.namespace,
                    record.vm.spec.id, uid)  # fmt: skip
        record.vm.status.state = State.DELETING
        self._remove(uid)

    def _remove(self, uid: str) -> None:
        record = self._vms.get(uid)
        if record is None or record.state != State.DELETING:
            return
        del self._vms[uid]
        shutil.rmtree(record.directory, ignore_errors=True)
        for parent in (record.directory.parent, record.directory.parent.parent):
            try:
                os.rmdir(parent)
            except OSError:
                break

    def _set_state(self, record: VmRecord, state: State.ValueType) -> None:
        record.vm.status.state = state
        record.vm.version += 1
        record.vm.spec.updated_at.GetCurrentTime()
        record.created_monotonic = self._clock.monotonic() if state == State.CREATED else None

    @staticmethod
    def _copy(vm: microvm_pb2.MicroVM) -> microvm_pb2.MicroVM:
        copy = microvm_pb2.MicroVM()
        copy.CopyFrom(vm)
        return copy
