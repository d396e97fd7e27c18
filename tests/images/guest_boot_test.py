"""GI-100: the Debian guest root filesystem built here boots under QEMU with Debian's cloud
kernel; systemd reaches multi-user.target on the serial console, and the image's rules hold
inside the running guest (a machine-id made at boot, networkd and resolved active, eth0 left
alone, eth1 configured by DHCP, wait-online satisfied, resolv.conf on resolved, no failed
unit). The time from QEMU's start to multi-user.target is printed, not asserted."""

from __future__ import annotations

import asyncio
import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from images import guestboot
from images.hostfs import have

from batteryop.testing import guest_image

GUEST = Path("src/images/guest")
MULTI_USER = r"Reached target multi-user\.target"

# Each command runs on the console's root shell (autologin on ttyS0), in this order; its output
# is compared.
CHECKS = {
    "machine-id": "cat /etc/machine-id",
    "active": "systemctl is-active systemd-networkd.service systemd-resolved.service",
    # wait-online first: until it returns, eth1 may be routable yet still "configuring".
    "online": "systemctl start systemd-networkd-wait-online.service && echo online",
    "links": "networkctl --no-legend list",
    "eth1-status": "networkctl --no-pager status eth1; journalctl --no-pager -b -u systemd-networkd",
    "eth1": "ip -4 -o addr show dev eth1",
    "eth0": "ip -4 -o addr show dev eth0",
    "resolv": "readlink /etc/resolv.conf",
    "failed": "systemctl --failed --no-legend --plain",
    "analyze": "systemd-analyze",
}


@pytest.mark.req("GI-100")
def test_the_init_loads_modules_in_dependency_order(tmp_path: Path) -> None:
    kit = guest_image.unpack_kit(tmp_path / "kit")
    order = [ko.stem for ko in guest_image.load_order(kit.modules, guest_image.MODULES)]
    for first, then in (
        ("virtio_ring", "virtio"),
        ("virtio", "virtio_pci"),
        ("virtio_pci_modern_dev", "virtio_pci"),
        ("virtio", "virtio_blk"),
        ("net_failover", "virtio_net"),
        ("failover", "net_failover"),
    ):
        assert order.index(first) < order.index(then), order
    assert len(order) == len(set(order))
    with pytest.raises(guest_image.BootError, match="module no_such_module is not in"):
        guest_image.load_order(kit.modules, ["no_such_module"])


@pytest.mark.req("GI-100")
def test_the_kernel_needs_an_initramfs_for_virtio(tmp_path: Path) -> None:
    """Why the test makes an initramfs: Debian's cloud kernel has ext4 and devtmpfs built in,
    virtio and virtio-blk as modules (GI-004's kernel has them all built in)."""
    kit = guest_image.unpack_kit(tmp_path / "kit")
    config = guest_image.kernel_config(kit.config)
    assert config["CONFIG_EXT4_FS"] == "y"
    assert config["CONFIG_DEVTMPFS"] == "y"
    assert config["CONFIG_VIRTIO_BLK"] == "m"
    assert config["CONFIG_VIRTIO_PCI"] == "m"
    archive = guest_image.initramfs(kit, tmp_path / "initrd.gz")
    listing = gzip.decompress(archive.read_bytes())
    assert listing.startswith(b"070701")
    for name in (b"init\0", b"bin/busybox\0", b"modules.order\0", b"lib/modules/virtio_blk.ko\0"):
        assert name in listing
    assert listing.rstrip(b"\0").endswith(b"TRAILER!!!")


@pytest.mark.req("GI-100", "GI-012", "GI-013", "GI-022", "GI-023", "GI-024", "GI-025")
def test_the_debian_rootfs_boots_to_multi_user_under_qemu(tmp_path: Path) -> None:
    for tool in ("apt-get", "dpkg-deb", "systemctl", "mkfs.ext4"):
        have(tool)
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not found: install Debian's qemu-system-x86")
    accel, why = guest_image.accelerator()
    root = tmp_path / "root"
    built = subprocess.run(
        ["bash", str(GUEST / "debian/build-rootfs.sh"), "--arch", "amd64", "--out", str(root)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    assert (root / "etc/machine-id").read_text() == ""
    kit = guest_image.unpack_kit(tmp_path / "kit")
    initrd = guest_image.initramfs(kit, tmp_path / "initrd.gz")
    disk = guest_image.root_disk(root, tmp_path / "root.img")
    shutil.rmtree(root)
    results, seconds, reached = asyncio.run(_boot(kit, initrd, disk, accel))

    assert re.fullmatch(r"[0-9a-f]{32}", results["machine-id"]), results["machine-id"]
    assert results["active"].split() == ["active", "active"]
    # networkctl: index, name, type, operational state, setup state.
    links = {line.split()[1]: line.split()[3:] for line in results["links"].splitlines()}
    assert links["eth0"][1] == "unmanaged", results["links"]  # GI-022
    assert links["eth1"] == ["routable", "configured"], results["eth1-status"]  # GI-023
    assert results["online"] == "online"  # GI-024
    assert " inet 10.0.3." in results["eth1"]  # the lease from eth1's network
    assert results["eth0"] == ""
    assert results["resolv"] == "../run/systemd/resolve/stub-resolv.conf"  # GI-025
    assert results["failed"] == ""
    print(
        f"\nguest boot ({accel}: {why}): QEMU start to multi-user.target {seconds:.1f} s "
        f"(one run); console: {reached.strip()}; guest: {results['analyze'].splitlines()[0]}"
    )


async def _boot(
    kit: guest_image.Kit, initrd: Path, disk: Path, accel: str
) -> tuple[dict[str, str], float, str]:
    guest = await guestboot.Guest.start(guest_image.qemu_command(kit.vmlinuz, initrd, disk, accel))
    try:
        # The kernel takes /dev/vda from the initramfs' /init (GI-012: nothing in fstab).
        await guest.wait_for(r"EXT4-fs \(vda\): mounted filesystem", 300)
        await guest.wait_for(r"Initializing machine ID from random generator", 120)  # GI-013
        reached, seconds = await guest.wait_for(MULTI_USER, 300)
        await guest.wait_for(r"# $", 120)  # the autologin shell's prompt
        await guest.run(["export SYSTEMD_PAGER= SYSTEMD_COLORS=0 TERM=dumb"])
        out = await guest.run(list(CHECKS.values()), timeout=120)
        guest.send("poweroff")
        assert await guest.stop(timeout=120) == 0
        return {key: out[command].strip() for key, command in CHECKS.items()}, seconds, reached
    finally:
        guest.kill()
