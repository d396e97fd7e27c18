"""The Debian guest as QEMU boots it (GI-100, GI-101, GI-026): Debian's cloud kernel, a minimal
initramfs made here (a static busybox, the kernel's own virtio modules in dependency order and
`src/images/guest/boot/init.sh`), the root filesystem built by `debian/build-rootfs.sh` with
flintlock's guest agent as an ext4 disk made without mounting anything (`mkfs.ext4 -d`), and
QEMU's q35 machine with the disk on virtio-blk. KVM when it can run Debian's kernel, QEMU's
emulator otherwise.

`ensure_image()` builds the kernel, initramfs and disk once per definition and caches them
under `$BATTERYOP_CACHE/guest-image/<key>/`, the key being the sha256 of the definition's
files, the kernel lock and the guest agent's pinned source: the boot test builds its own tree,
the fake flintlockd's QEMU guests (`fake_flintlock.qemu`) boot the cached disk through a
copy-on-write overlay each. The Debian packages are those apt resolves when the cache is made
(its index is refreshed daily), so a cached disk is not rebuilt for a newer package.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from batteryop.release import debs
from batteryop.testing import guest_agent
from batteryop.testing.controlplane.gobuild import cache_root
from batteryop.testing.progress import Heartbeat, run_reporting

GUEST: Final = Path("src/images/guest")
BOOT: Final = GUEST / "boot"
LOCK: Final = BOOT / "debs.lock.json"
INIT: Final = BOOT / "init.sh"
BUILD_ROOTFS: Final = GUEST / "debian/build-rootfs.sh"
# What /dev/vda and the two network interfaces need: virtio over PCI, its block and net drivers.
MODULES: Final = ("virtio_pci", "virtio_blk", "virtio_net")
AGENT_PORT: Final = 1024
"""The guest agent's control port (flintlock-api.md §6.2), on vsock or, here, on TCP."""
SSH_PORT: Final = 1025
"""The guest agent's SSH port: a raw pipe to the guest's sshd (flintlock-api.md §6.2, §8.4;
GI-102: forwarded to a loopback port like the control port)."""
TCP_AGENT_ARGS: Final = ("systemd.setenv=GA_NET=tcp", "systemd.setenv=GA_TCP_ADDR=0.0.0.0")
"""GI-101: kernel arguments that make systemd give every unit, the agent's among them, these
variables: the agent listens on TCP on every address instead of vsock, which QEMU cannot offer
without /dev/vhost-vsock. The image itself is unchanged (vsock by default, GI-021)."""


class BootError(RuntimeError):
    """The guest did not boot, or a step of making its kit failed."""


# --- the kit -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kit:
    """Debian's cloud kernel unpacked (vmlinuz and its modules) and a static busybox."""

    vmlinuz: Path
    modules: Path  # lib/modules/<release>
    config: Path
    busybox: Path


def unpack_kit(into: Path, lock: Path = LOCK) -> Kit:
    """Fetch the pinned kernel and busybox (sha256-checked, cached) and unpack them."""
    paths = debs.fetch(debs.load_lock(lock).for_arch("amd64"))
    debs.unpack(paths, into)
    (vmlinuz,) = sorted((into / "boot").glob("vmlinuz-*"))
    release = vmlinuz.name.removeprefix("vmlinuz-")
    return Kit(
        vmlinuz=vmlinuz,
        modules=into / "lib/modules" / release,
        config=into / "boot" / f"config-{release}",
        busybox=into / "bin/busybox",
    )


def kernel_config(path: Path) -> dict[str, str]:
    """CONFIG_X -> y/m/value, from a kernel's `boot/config-*`."""
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, value = line.split("=", 1)
            found[key] = value
    return found


def modinfo(ko: Path) -> dict[str, str]:
    """The `.modinfo` section of a kernel module (ELF64 little-endian): key -> value."""
    data = ko.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise BootError(f"{ko} is not an ELF64 kernel module")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = section(shstrndx)
    for i in range(shnum):
        name, offset, size = section(i)
        if data[names_at + name : data.index(b"\0", names_at + name)] == b".modinfo":
            info: dict[str, str] = {}
            for entry in data[offset : offset + size].split(b"\0"):
                if b"=" in entry:
                    key, value = entry.decode().split("=", 1)
                    info.setdefault(key, value)
            return info
    raise BootError(f"{ko} has no .modinfo section")


def load_order(modules: Path, wanted: Sequence[str]) -> list[Path]:
    """`wanted` and everything they depend on (their `depends=`), each after its dependencies."""
    index = {ko.stem.replace("-", "_"): ko for ko in modules.rglob("*.ko")}
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise BootError(f"module dependency cycle: {' -> '.join((*path, name))}")
        if name in seen:
            return
        if name not in index:
            raise BootError(f"module {name} is not in {modules}")
        for dep in filter(None, modinfo(index[name]).get("depends", "").split(",")):
            visit(dep, (*path, name))
        seen.add(name)
        order.append(index[name])

    for name in wanted:
        visit(name, ())
    return order


@dataclass
class _Newc:
    """A cpio archive in the kernel's initramfs format (`newc`), owned by root."""

    out: io.BytesIO = field(default_factory=io.BytesIO)
    ino: int = 1

    def add(self, name: str, mode: int, data: bytes = b"") -> None:
        fields = (self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
        self.out.write(b"070701" + b"".join(b"%08x" % v for v in fields))
        self.out.write(name.encode() + b"\0")
        self._pad()
        self.out.write(data)
        self._pad()
        self.ino += 1

    def _pad(self) -> None:
        self.out.write(b"\0" * (-self.out.tell() % 4))

    def finish(self) -> bytes:
        self.add("TRAILER!!!", 0)
        return self.out.getvalue()


def initramfs(kit: Kit, out: Path, init: Path = INIT, wanted: Iterable[str] = MODULES) -> Path:
    """A gzipped newc archive: busybox, the modules in load order, /modules.order and /init."""
    order = load_order(kit.modules, list(wanted))
    cpio = _Newc()
    for folder in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"):
        cpio.add(folder, 0o040755)
    cpio.add("dev/console", 0o020600)  # the kernel opens it before /init runs; rdev 0:0 is fine
    cpio.add("bin/busybox", 0o100755, kit.busybox.read_bytes())
    for ko in order:
        cpio.add(f"lib/modules/{ko.stem}.ko", 0o100644, ko.read_bytes())
    cpio.add("modules.order", 0o100644, "".join(f"{ko.stem}\n" for ko in order).encode())
    cpio.add("init", 0o100755, init.read_bytes())
    out.write_bytes(gzip.compress(cpio.finish(), compresslevel=1))
    return out


def root_disk(tree: Path, out: Path, size_mb: int = 1024) -> Path:
    """An ext4 image of `tree`, made by mkfs.ext4 -d (no mount, no loop device)."""
    if shutil.which("mkfs.ext4") is None:
        raise BootError("mkfs.ext4 not found: e2fsprogs is needed for the root disk")
    out.unlink(missing_ok=True)
    done = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", "root", "-E", "root_owner=0:0", "-d", str(tree),
         str(out), f"{size_mb}M"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BootError(f"mkfs.ext4 -d {tree} failed: {done.stderr.strip()}")
    return out


# --- the boot ------------------------------------------------------------------------------


def accelerator() -> tuple[str, str]:
    """KVM where it can run Debian's kernel, else QEMU's emulator (TCG), with the reason.

    On these machines /dev/kvm is PVM (`kvm_pvm`, KVM nested without hardware virtualization),
    which runs only kernels built as PVM guests: Debian's stops after its real-mode setup.
    """
    if not Path("/dev/kvm").exists():
        return "tcg", "no /dev/kvm"
    if Path("/sys/module/kvm_pvm").exists():
        return "tcg", "/dev/kvm is PVM (kvm_pvm), which runs only PVM guest kernels"
    return "kvm", "/dev/kvm"


def qemu_command(
    kernel: Path,
    initrd: Path,
    disk: Path,
    accel: str = "kvm",
    memory_mb: int = 512,
    *,
    cpus: int = 1,
    disk_format: str = "raw",
    forwards: Sequence[tuple[int, int]] = (),
    kernel_args: Sequence[str] = (),
    serial: str = "stdio",
) -> list[str]:
    """QEMU's q35 machine: the disk on virtio-blk, eth0 and eth1 on virtio-net (QEMU's user
    network; eth1's has a DHCP server), the serial console on `serial`, nothing else.

    Not `microvm`: under TCG it has no timer to calibrate the TSC against (no PIT reference,
    HPET or ACPI PM timer) and Debian's kernel stops there; q35 has an HPET. `net.ifnames=0`
    keeps the kernel's eth0/eth1, the names a Firecracker MicroVM's interfaces have. Both
    networks are IPv4 only, as a MicroVM's are: QEMU's user network otherwise advertises IPv6
    routers that ask for DHCPv6, which it does not serve, and networkd then keeps eth1
    "configuring" (GI-023 is DHCP for IPv4). Each (host port, guest port) of `forwards` forwards
    127.0.0.1:<host port> to the guest's eth1 address (GI-101: the guest agent's ports over
    TCP), one TCP connection per connection.
    """
    lan = "user,id=lan,net=10.0.3.0/24,restrict=on,ipv6=off"
    for host, guest in forwards:
        lan += f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
    append = " ".join(["console=ttyS0 reboot=t panic=-1 net.ifnames=0", *kernel_args])
    return [
        "qemu-system-x86_64",
        "-M", "q35", "-accel", accel, "-cpu", "host" if accel == "kvm" else "max",
        "-m", str(memory_mb), "-smp", str(cpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-serial", serial, "-no-reboot",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", append,
        "-drive", f"id=root,file={disk},format={disk_format},if=none",
        "-device", "virtio-blk-pci,drive=root",
        "-netdev", "user,id=mmds,net=10.0.2.0/24,restrict=on,ipv6=off",
        "-device", "virtio-net-pci,netdev=mmds",
        "-netdev", lan,
        "-device", "virtio-net-pci,netdev=lan",
    ]  # fmt: skip


# --- the cached image ----------------------------------------------------------------------


@dataclass(frozen=True)
class GuestImage:
    """What a guest boots from: kernel, initramfs, and the root filesystem disk (raw ext4,
    never written: each guest gets an overlay)."""

    vmlinuz: Path
    initrd: Path
    disk: Path
    agent_version: str


def build_tree(out: Path, arch: str = "amd64") -> Path:
    """The Debian root filesystem for arch, with the guest agent (GI-026), in `out`."""
    agent = guest_agent.ensure_agent(arch)
    argv = ["bash", str(BUILD_ROOTFS), "--arch", arch, "--out", str(out)]
    beat = Heartbeat(f"Building the {arch} guest root filesystem", left="its root disk")
    done = run_reporting(
        [*argv, "--guest-agent", str(agent.folder)], beat, is_progress=lambda _: False, timeout=900
    )
    if done.returncode != 0:
        raise BootError(f"build-rootfs.sh failed: {done.tail[-2000:]}")
    beat.beat("built", force=True)
    return out


def image_key(arch: str = "amd64") -> str:
    """What the cached image is made of: the definition's files, the lock, the agent's pin."""
    digest = hashlib.sha256(arch.encode())
    digest.update(guest_agent.pinned_source().sha256.encode())
    files = [
        BUILD_ROOTFS,
        INIT,
        LOCK,
        *sorted(p for p in (GUEST / "rootfs").rglob("*") if p.is_file()),
    ]
    for path in files:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def ensure_image(arch: str = "amd64") -> GuestImage:
    """The guest image, built once per key (concurrent callers wait for one build)."""
    out = cache_root() / "guest-image" / image_key(arch)
    image = GuestImage(
        out / "vmlinuz", out / "initrd.gz", out / "root.img", guest_agent.pinned_source().version
    )
    if (out / ".complete").is_file():
        return image
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".complete").is_file():
            with tempfile.TemporaryDirectory(prefix="guest-image-", dir=out) as tmp:
                kit = unpack_kit(Path(tmp) / "kit")
                shutil.copy(kit.vmlinuz, image.vmlinuz)
                initramfs(kit, image.initrd)
                tree = build_tree(Path(tmp) / "root", arch)
                root_disk(tree, image.disk)
            (out / ".complete").touch()
    return image
