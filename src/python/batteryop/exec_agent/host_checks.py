"""Whether this Host can run claimed MicroVMs' commands: the checks behind the Node report.

`check_host` runs every check and returns a `HostReport`: ready or not, the reason of the first
check that failed, in this order, and a message listing every problem found:

1. `HostImageNotReady` (EA-033): a file in the not-ready directory names a reason. The Host
   Image's units write `<dir>/<unit>` while they are not done; each file's first line (at most
   `MAX_REASON_CHARS`, its name when empty) is reported.
2. `KVMUnavailable` (EA-031): the Host has no KVM device: the kernel's sysfs entry for it
   (`<kvm sysfs dir>/dev`) is missing, or the device node is not a character device. The device
   is never opened: the agent needs no access to it to see it exists.
3. `ThinPoolMissing` (EA-032): no device-mapper device named after containerd's thin pool, read
   from `<sys block dir>/dm-*/dm/name`. An empty pool name turns this check off (a Host whose
   containerd uses another snapshotter).
4. `FlintlockdNotReady` (EA-030): flintlockd does not answer `ServerInfo`.
5. `ExecDisabled` (EA-030): it answers, without exec enabled.

Otherwise `Ready`. The message is capped at `MAX_MESSAGE_CHARS`.

Requirements: EA-030, EA-031, EA-032, EA-033.
"""

from __future__ import annotations

import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2
from batteryop.api.conditions import HostReportReason

MAX_REASON_CHARS: Final = 256
"""The longest not-ready reason read from one file."""
MAX_MESSAGE_CHARS: Final = 1024
"""The longest report message."""


@dataclass(frozen=True)
class HostPaths:
    """Where the checks look; every path is configurable so tests and odd Hosts can move them."""

    not_ready_dir: Path = Path("/run/battery/not-ready.d")
    kvm_device: Path = Path("/dev/kvm")
    kvm_sysfs_dir: Path = Path("/sys/class/misc/kvm")
    thin_pool: str = "flintlock-thinpool"
    sys_block_dir: Path = Path("/sys/block")


@dataclass(frozen=True)
class HostReport:
    """The Node report: ready, the first failing check's reason, every problem in the message."""

    ready: bool
    reason: HostReportReason
    message: str


ServerInfo = Callable[[], Awaitable[microvms_pb2.ServerInfoResponse]]
"""Asks this Host's flintlockd for ServerInfo; raises when it does not answer."""


def not_ready_reasons(directory: Path) -> list[str]:
    """EA-033: the reason each file in `directory` names, by file name; [] when there is none."""
    try:
        files = sorted(p for p in directory.iterdir() if p.is_file())
    except FileNotFoundError:
        return []
    reasons = []
    for path in files:
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            text = ""
        first = text.splitlines()[0].strip() if text else ""
        reasons.append(f"{path.name}: {first[:MAX_REASON_CHARS]}" if first else path.name)
    return reasons


def kvm_problem(paths: HostPaths) -> str | None:
    """EA-031: why the Host has no KVM device, or None."""
    if not (paths.kvm_sysfs_dir / "dev").is_file():
        return f"the kernel has no KVM device ({paths.kvm_sysfs_dir / 'dev'} is missing)"
    try:
        mode = paths.kvm_device.stat().st_mode
    except OSError:
        return f"{paths.kvm_device} does not exist"
    if not stat.S_ISCHR(mode):
        return f"{paths.kvm_device} is not a character device"
    return None


def thin_pool_problem(paths: HostPaths) -> str | None:
    """EA-032: why containerd's thin pool is missing, or None (also when the check is off)."""
    if not paths.thin_pool:
        return None
    for name_file in sorted(paths.sys_block_dir.glob("dm-*/dm/name")):
        try:
            if name_file.read_text().strip() == paths.thin_pool:
                return None
        except OSError:
            continue
    return f"no device-mapper device is named {paths.thin_pool}"


async def check_host(paths: HostPaths, server_info: ServerInfo) -> HostReport:
    """Run every check (see the module docstring) and report the first failure's reason."""
    problems: list[tuple[HostReportReason, str]] = []
    for reason in not_ready_reasons(paths.not_ready_dir):  # EA-036: the configured directory
        problems.append((HostReportReason.HOST_IMAGE_NOT_READY, f"Host Image not ready: {reason}"))
    kvm = kvm_problem(paths)
    if kvm:
        problems.append((HostReportReason.KVM_UNAVAILABLE, kvm))
    pool = thin_pool_problem(paths)
    if pool:
        problems.append((HostReportReason.THIN_POOL_MISSING, pool))
    try:
        info = await server_info()
    except Exception as e:  # any failure to answer is "not ready", never a crash of the loop
        problems.append((HostReportReason.FLINTLOCKD_NOT_READY, f"flintlockd: {_describe(e)}"))
    else:
        if not info.exec_enabled:
            problems.append(
                (HostReportReason.EXEC_DISABLED, "flintlockd serves no exec API (exec disabled)")
            )
    if not problems:
        version = info.version or "unknown version"
        return HostReport(True, HostReportReason.READY, f"flintlockd {version} with exec enabled")
    message = "; ".join(text for _, text in problems)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return HostReport(False, problems[0][0], message)


def _describe(error: Exception) -> str:
    details = getattr(error, "details", None)
    code = getattr(error, "code", None)
    if callable(details) and callable(code):  # a gRPC error
        return f"{code().name}: {details()}"
    return str(error) or type(error).__name__
