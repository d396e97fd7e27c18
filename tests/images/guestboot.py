"""Boot a guest root filesystem under QEMU/KVM (GI-100): Debian's cloud kernel, a minimal
initramfs made here (a static busybox, the kernel's own virtio modules in dependency order and
`src/images/guest/boot/init.sh`), the tree as an ext4 disk made without mounting anything
(`mkfs.ext4 -d`), and QEMU's q35 machine with the disk on virtio-blk and the serial console on
a pipe read line by line. KVM when it can run Debian's kernel, QEMU's emulator otherwise."""

from __future__ import annotations

import asyncio
import gzip
import io
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from batteryop.release import debs

BOOT = Path("src/images/guest/boot")
LOCK = BOOT / "debs.lock.json"
INIT = BOOT / "init.sh"
# What /dev/vda and the two network interfaces need: virtio over PCI, its block and net drivers.
MODULES = ("virtio_pci", "virtio_blk", "virtio_net")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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
    kit: Kit, initrd: Path, disk: Path, accel: str = "kvm", memory_mb: int = 512
) -> list[str]:
    """QEMU's q35 machine: the disk on virtio-blk, eth0 and eth1 on virtio-net (QEMU's user
    network; eth1's has a DHCP server), the serial console on stdio, nothing else.

    Not `microvm`: under TCG it has no timer to calibrate the TSC against (no PIT reference,
    HPET or ACPI PM timer) and Debian's kernel stops there; q35 has an HPET. `net.ifnames=0`
    keeps the kernel's eth0/eth1, the names a Firecracker MicroVM's interfaces have. Both
    networks are IPv4 only, as a MicroVM's are: QEMU's user network otherwise advertises IPv6
    routers that ask for DHCPv6, which it does not serve, and networkd then keeps eth1
    "configuring" (GI-023 is DHCP for IPv4).
    """
    return [
        "qemu-system-x86_64",
        "-M", "q35", "-accel", accel, "-cpu", "host" if accel == "kvm" else "max",
        "-m", str(memory_mb), "-smp", "1",
        "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
        "-kernel", str(kit.vmlinuz), "-initrd", str(initrd),
        "-append", "console=ttyS0 reboot=t panic=-1 net.ifnames=0",
        "-drive", f"id=root,file={disk},format=raw,if=none",
        "-device", "virtio-blk-pci,drive=root",
        "-netdev", "user,id=mmds,net=10.0.2.0/24,restrict=on,ipv6=off",
        "-device", "virtio-net-pci,netdev=mmds",
        "-netdev", "user,id=lan,net=10.0.3.0/24,restrict=on,ipv6=off",
        "-device", "virtio-net-pci,netdev=lan",
    ]  # fmt: skip


@dataclass
class Guest:
    """A running QEMU and its serial console, every line kept (ANSI colours removed)."""

    proc: asyncio.subprocess.Process
    started: float
    console: list[str] = field(default_factory=list)
    _partial: str = ""

    @classmethod
    async def start(cls, argv: Sequence[str]) -> Guest:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(proc, started)

    async def _read(self) -> str | None:
        """The next complete line, or the trailing partial line (a shell prompt) when the
        console goes quiet for a moment; None at end of output."""
        assert self.proc.stdout is not None
        while "\n" not in self._partial:
            try:
                chunk = await asyncio.wait_for(self.proc.stdout.read(4096), 0.5)
            except TimeoutError:
                if self._partial:
                    line, self._partial = self._partial, ""
                    return line
                continue
            if not chunk:
                line, self._partial = self._partial, ""
                return line or None
            self._partial += chunk.decode(errors="replace")
        line, self._partial = self._partial.split("\n", 1)
        return line

    async def wait_for(self, pattern: str, timeout: float) -> tuple[str, float]:
        """The first console line matching `pattern` and the seconds since QEMU started."""
        wanted = re.compile(pattern)

        async def scan() -> tuple[str, float]:
            while (raw := await self._read()) is not None:
                line = ANSI.sub("", raw).replace("\r", "")
                self.console.append(line)
                if wanted.search(line):
                    return line, time.monotonic() - self.started
            raise BootError(f"QEMU exited before /{pattern}/:\n" + self.tail())

        try:
            return await asyncio.wait_for(scan(), timeout)
        except TimeoutError:
            raise BootError(
                f"no /{pattern}/ on the console in {timeout} s:\n" + self.tail()
            ) from None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    async def run(self, script: Sequence[str], timeout: float = 60) -> dict[str, str]:
        """Run shell commands on the logged-in serial console; each command's output between
        markers the typed text cannot match (`@@""` is echoed, `@@` is printed)."""
        results: dict[str, str] = {}
        for i, command in enumerate(script):
            self.send(f'echo "@@""begin {i}"; {command}; echo "@@""end {i}"')
            await self.wait_for(rf"^@@begin {i}$", timeout)
            start = len(self.console)
            await self.wait_for(rf"^@@end {i}$", timeout)
            results[command] = "\n".join(self.console[start:-1])
        return results

    async def stop(self, timeout: float = 30) -> int:
        """Wait for QEMU to exit (the guest powered off), keeping the console; killed if not."""

        async def drain() -> int:
            while (raw := await self._read()) is not None:
                self.console.append(ANSI.sub("", raw).replace("\r", ""))
            return await self.proc.wait()

        try:
            return await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise BootError("the guest did not power off:\n" + self.tail()) from None

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.console[-lines:])
