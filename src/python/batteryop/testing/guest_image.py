"""The guest as QEMU boots it (GI-100, GI-101, GI-026): the release's guest kernel
(`batteryop.release.guest_kernel`: Debian's kernel source with Firecracker's CI configuration,
virtio-mmio only, everything the root volume needs built in, so no initramfs) and root
filesystem (`batteryop.release.guest_rootfs`: Debian's packages with flintlock's guest agent),
on the QEMU machine with Firecracker's device model: `microvm` for amd64, `virt` for arm64,
every device on virtio-mmio. KVM when it can run the kernel, QEMU's emulator otherwise (always
for a foreign architecture).

`ensure_image(arch)` builds the two images of one architecture with the release's own code
once per definition, as OCI layouts cached under `$BATTERYOP_CACHE/guest-image/<key>/` (the key:
the kernel's cache key, the root filesystem's definition, the guest agent's pin); `publish`
pushes them to a registry, and the fake flintlockd's QEMU guests (`fake_flintlock.qemu`) pull
them from there by the digests a Pool names, as flintlockd does. The boot test makes its own
disk of a tree with `root_disk` (`mkfs.ext4 -d`, no mount). The Debian packages are those apt
resolves when the cache is made (its index is refreshed daily), so a cached image is not
rebuilt for a newer package.
"""

from __future__ import annotations

import fcntl
import hashlib
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.api.samples import GuestImages
from batteryop.release import guest_agent, guest_kernel, guest_rootfs, oci
from batteryop.release.debs import cache_root
from batteryop.release.version import Version

GUEST: Final = Path("src/images/guest")
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


# --- the machine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """How QEMU boots one architecture's guest the way Firecracker does: the kernel given with
    `-kernel` (no firmware, no bootloader), every device on virtio-mmio."""

    qemu: str
    machine: str
    cpu_tcg: str
    console: str
    """The console device the kernel writes to (`console=`)."""
    serial_args: tuple[str, ...]
    """What puts that console on QEMU's `-serial`-style character device `{serial}`."""
    devices_reversed: bool = False
    """Whether the guest names the machine's virtio-mmio devices in the reverse of their
    command-line order: on `virt` the first `-device` gets the highest transport address, and
    Linux numbers them from the lowest (QEMU's `create_virtio_devices` says so), so the last
    virtio-net device would be eth0. The devices are then given last to first."""


MACHINES: Final = {
    # microvm: Firecracker's device model (no PCI, no firmware). Its legacy PIT and PIC stay on
    # so that, under TCG, the kernel can calibrate its TSC (there is no kvm-clock).
    "amd64": Machine(
        "qemu-system-x86_64",
        "microvm,x-option-roms=off,pit=on,pic=on,rtc=on,isa-serial=on,acpi=on",
        "max",
        "ttyS0",
        ("-serial", "{serial}"),
    ),
    # virt: its virtio-mmio slots are described in the device tree. Firecracker's arm64
    # configuration has no PL011 driver (Firecracker's UART is a 16550), so the console is a
    # virtio console, hvc0.
    "arm64": Machine(
        "qemu-system-aarch64",
        "virt,gic-version=3",
        "cortex-a72",
        "hvc0",
        ("-device", "virtio-serial-device", "-chardev", "{chardev},id=console",
         "-device", "virtconsole,chardev=console"),
        devices_reversed=True,
    ),
}  # fmt: skip


def machine_for(arch: str) -> Machine:
    try:
        return MACHINES[arch]
    except KeyError:
        raise BootError(f"architecture must be one of {sorted(MACHINES)}, not {arch!r}") from None


MKFS_TIMEOUT_SECONDS: Final = 600


def root_disk(tree: Path, out: Path, size_mb: int = 1024) -> Path:
    """An ext4 image of `tree`, made by mkfs.ext4 -d (no mount, no loop device): what the boot
    test boots, and what the fake flintlockd makes of a pulled root filesystem image."""
    if shutil.which("mkfs.ext4") is None:
        raise BootError("mkfs.ext4 not found: e2fsprogs is needed for the root disk")
    out.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-L", "root", "-E", "root_owner=0:0", "-d", str(tree),
             str(out), f"{size_mb}M"],
            capture_output=True, text=True, check=False, timeout=MKFS_TIMEOUT_SECONDS,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise BootError(f"mkfs.ext4 -d {tree} took over {MKFS_TIMEOUT_SECONDS} s") from None
    if done.returncode != 0:
        raise BootError(f"mkfs.ext4 -d {tree} ({size_mb} MiB) failed: {done.stderr.strip()[-500:]}")
    return out


def accelerator(arch: str = "amd64") -> tuple[str, str]:
    """KVM where it can run the guest kernel, else QEMU's emulator (TCG), with the reason.

    On these machines /dev/kvm is PVM (`kvm_pvm`, KVM nested without hardware virtualization),
    which runs only kernels built as PVM guests.
    """
    native = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine())
    if arch != native:
        return "tcg", f"{arch} on a {platform.machine()} machine"
    if not Path("/dev/kvm").exists():
        return "tcg", "no /dev/kvm"
    if Path("/sys/module/kvm_pvm").exists():
        return "tcg", "/dev/kvm is PVM (kvm_pvm), which runs only PVM guest kernels"
    return "kvm", "/dev/kvm"


def host_tsc_khz(cpuinfo: Path = Path("/proc/cpuinfo")) -> int | None:
    """This machine's CPU frequency in kHz (its first `cpu MHz` line), or None."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "cpu MHz":
            try:
                return round(float(value) * 1000)
            except ValueError:
                return None
    return None


def tcg_kernel_args(arch: str, accel: str) -> list[str]:
    """What an amd64 guest under QEMU's emulator needs to keep time: its TSC runs at this
    machine's rate, and `microvm` has no HPET or ACPI PM timer to measure it against; the PIT
    it has is too coarse under load (seen: "tsc: Unable to calibrate against PIT", then a hang
    before the root mount), so the frequency is given (`tsc_early_khz`). Not for KVM, where the
    kernel has kvm-clock, as on Firecracker; arm64 has its architected timer."""
    if arch != "amd64" or accel != "tcg":
        return []
    khz = host_tsc_khz()
    return [f"tsc_early_khz={khz}"] if khz else []


def qemu_command(
    kernel: Path,
    disk: Path,
    accel: str = "kvm",
    memory_mb: int = 512,
    *,
    arch: str = "amd64",
    cpus: int = 1,
    disk_format: str = "raw",
    forwards: Sequence[tuple[int, int]] = (),
    kernel_args: Sequence[str] = (),
    serial: str = "stdio",
) -> list[str]:
    """`arch`'s machine (`MACHINES`): the disk on virtio-blk, eth0 and eth1 on virtio-net
    (QEMU's user network; eth1's has a DHCP server), the console on `serial` (a QEMU character
    device: `stdio`, `file:PATH`), nothing else.

    The root is /dev/vda, mounted by the kernel itself (GI-004, GI-012). `net.ifnames=0`
    keeps the kernel's eth0/eth1, the names a Firecracker MicroVM's interfaces have. Both
    networks are IPv4 only, as a MicroVM's are: QEMU's user network otherwise advertises IPv6
    routers that ask for DHCPv6, which it does not serve, and networkd then keeps eth1
    "configuring" (GI-023 is DHCP for IPv4). Each (host port, guest port) of `forwards` forwards
    127.0.0.1:<host port> to the guest's eth1 address (GI-101: the guest agent's ports over
    TCP), one TCP connection per connection.
    """
    m = machine_for(arch)
    lan = "user,id=lan,net=10.0.3.0/24,restrict=on,ipv6=off"
    for host, guest in forwards:
        lan += f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
    append = " ".join(
        [
            f"console={m.console} reboot=t panic=-1 root=/dev/vda rw net.ifnames=0",
            *tcg_kernel_args(arch, accel),
            *kernel_args,
        ]
    )
    chardev = "stdio" if serial == "stdio" else f"file,path={serial.removeprefix('file:')}"
    # In the guest: vda, then eth0 (left to the metadata service, GI-022), then eth1 (DHCP).
    devices = [
        "virtio-blk-device,drive=root",
        "virtio-net-device,netdev=mmds",
        "virtio-net-device,netdev=lan",
    ]
    console = [a.format(serial=serial, chardev=chardev) for a in m.serial_args]
    return [
        m.qemu,
        "-M", m.machine, "-accel", accel, "-cpu", "host" if accel == "kvm" else m.cpu_tcg,
        "-m", str(memory_mb), "-smp", str(cpus),
        "-nodefaults", "-no-user-config", "-display", "none", *console, "-no-reboot",
        "-kernel", str(kernel), "-append", append,
        "-drive", f"id=root,file={disk},format={disk_format},if=none",
        "-netdev", "user,id=mmds,net=10.0.2.0/24,restrict=on,ipv6=off",
        "-netdev", lan,
        *(arg for device in (devices[::-1] if m.devices_reversed else devices)
          for arg in ("-device", device)),
    ]  # fmt: skip


# --- the cached image ----------------------------------------------------------------------

TAG: Final = "dev"
"""The tag of the guest images built here for the stack's and the tests' registries."""
LOCAL_VERSION: Final = Version(python="", image_tag=TAG, revision="", created=0)


@dataclass(frozen=True)
class GuestImage:
    """One architecture's guest as a user pulls it: the release's two images (one
    architecture each, OCI layouts tagged `TAG`), and the kernel they hold."""

    arch: str
    kernel: Path
    kernel_layout: Path
    rootfs_layout: Path
    agent_version: str


def image_key(arch: str = "amd64") -> str:
    """What the cached images are made of: the kernel's inputs, the root filesystem's
    definition, the agent's pin."""
    digest = hashlib.sha256(arch.encode())
    digest.update(guest_kernel.cache_key(arch).encode())
    digest.update(guest_agent.pinned_source().sha256.encode())
    files = [
        guest_rootfs.BUILD_ROOTFS,
        *sorted(p for p in (GUEST / "rootfs").rglob("*") if p.is_file()),
    ]
    for path in files:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def ensure_image(arch: str = "amd64") -> GuestImage:
    """The guest images for `arch`, built once per key with the release's own code
    (`guest_kernel`, `guest_rootfs`); concurrent callers wait for one build."""
    machine_for(arch)
    out = cache_root() / "guest-image" / image_key(arch)
    image = GuestImage(
        arch,
        out / "vmlinux",
        out / guest_kernel.NAME,
        out / guest_rootfs.NAME,
        guest_agent.pinned_source().version,
    )
    if (out / ".complete").is_file():
        return image
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".complete").is_file():
            try:
                kernel = guest_kernel.build(arch)
                shutil.copyfile(kernel.kernel, image.kernel)
                guest_kernel.pack({arch: kernel.kernel}, image.kernel_layout, LOCAL_VERSION)
                with tempfile.TemporaryDirectory(prefix="guest-image-", dir=out) as tmp:
                    tree = guest_rootfs.build_tree(Path(tmp) / "root", arch)
                    guest_rootfs.build({arch: tree}, image.rootfs_layout, LOCAL_VERSION)
            except (guest_kernel.KernelError, guest_rootfs.RootfsError, oci.OciError) as err:
                raise BootError(f"the {arch} guest images: {err}") from err
            (out / ".complete").touch()
    return image


def publish(image: GuestImage, registry: str) -> GuestImages:
    """Both images pushed to the registry at `registry` (plain HTTP on loopback), digests
    unchanged; their references by digest."""
    refs = []
    for layout in (image.kernel_layout, image.rootfs_layout):
        ref = f"{registry}/{layout.name}:{TAG}"
        done = subprocess.run(
            ["skopeo", "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
             f"oci:{layout}:{TAG}", f"docker://{ref}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BootError(f"pushing {layout.name} to {registry}: {done.stderr.strip()[-500:]}")
        refs.append(f"{ref}@{oci.index_digest(layout, TAG)}")
    return GuestImages(*refs)
