"""GI-100: the Debian guest root filesystem built here boots under QEMU's microvm machine
(Firecracker's device model: virtio-mmio, no PCI, no firmware) with the release's guest kernel
(`batteryop.release.guest_kernel`) given with -kernel and no initramfs; the kernel mounts
/dev/vda itself, systemd reaches multi-user.target on the serial console, and the image's rules hold
inside the running guest (a machine-id made at boot, networkd and resolved active, eth0 left
alone, eth1 configured by DHCP, wait-online satisfied, resolv.conf on resolved, no failed
unit). The time from QEMU's start to multi-user.target is printed, not asserted."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Final

import pytest
from images import guestboot
from images.hostfs import have

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.release import guest_kernel
from batteryop.testing import guest_image
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_flintlock import agent_protocol
from batteryop.testing.fake_flintlock.images import ImageStore
from batteryop.testing.fake_flintlock.qemu import AGENT_HOST
from batteryop.testing.oci_registry import MISSING_REGISTRY, have_registry, loopback_registry

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
    kernel = guest_kernel.build("amd64")
    disk = guest_image.root_disk(root, tmp_path / "root.img")
    shutil.rmtree(root)
    results, seconds, reached = asyncio.run(_boot(kernel.kernel, disk, accel))

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


async def _boot(kernel: Path, disk: Path, accel: str) -> tuple[dict[str, str], float, str]:
    guest = await guestboot.Guest.start(guest_image.qemu_command(kernel, disk, accel))
    try:
        # The kernel mounts /dev/vda, named by root= (GI-012: nothing in fstab, no initramfs).
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


ARM64: Final = "BATTERYOP_GUEST_ARM64"
"""Set to 1 to build the arm64 guest (its kernel is a long cold build) and boot it: the release
check (docs/releasing.md). CI checks the arm64 kernel's configuration only."""
PING_TIMEOUT_SECONDS: Final = 1800.0


@pytest.mark.req("GI-030", "GI-101", "GI-002")
def test_the_arm64_guest_answers_ping_and_runs_commands_under_tcg(tmp_path: Path) -> None:
    """The arm64 kernel and root filesystem on QEMU's `virt` machine (every device on
    virtio-mmio, as on Firecracker) under TCG: boot to the guest agent's first `ping`, then
    commands through the agent, as the fake flintlockd runs them (GI-101's TCP port)."""
    if os.environ.get(ARM64) != "1":
        pytest.skip(
            f"the arm64 guest is the release check's: set {ARM64}=1 to build its kernel (a long "
            "cold build) and boot it; CI checks its configuration (guest_kernel_test.py)"
        )
    if shutil.which("qemu-system-aarch64") is None:
        pytest.skip("qemu-system-aarch64 not found: install Debian's qemu-system-arm")
    if not have_registry():
        pytest.skip(MISSING_REGISTRY)
    started = time.monotonic()
    image = guest_image.ensure_image("arm64")
    built = time.monotonic() - started
    # What a user's flintlockd boots: the images pulled from a registry by digest.
    with loopback_registry(tmp_path / "registry") as registry:
        refs = guest_image.publish(image, registry)
        store = ImageStore(cache=tmp_path / "pulled")
        kernel = asyncio.run(store.kernel(refs.kernel, guest_kernel.FILENAME, "arm64"))
        disk = asyncio.run(store.root_disk(refs.rootfs, "arm64"))
    overlay = tmp_path / "root.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(disk),
                    str(overlay)], check=True)  # fmt: skip
    port = free_port(AGENT_HOST)
    console = tmp_path / "console.log"
    argv = guest_image.qemu_command(
        kernel, overlay, "tcg", 1024, arch="arm64", disk_format="qcow2",
        forwards=((port, guest_image.AGENT_PORT),), kernel_args=guest_image.TCP_AGENT_ARGS,
        serial=f"file:{console}",
    )  # fmt: skip
    boot, outputs, round_trips = asyncio.run(_agent_session(argv, port, console))
    assert outputs["uname -m"] == "aarch64"
    assert guest_kernel.SIGNATURE in outputs["cat /proc/version"]
    assert outputs["cat /sys/bus/virtio/devices/*/modalias | sort -u | wc -l"] != "0"
    print(
        f"\narm64 guest (virt, TCG): image ready in {built:.0f} s; QEMU start to the agent's "
        f"first ping {boot:.1f} s; exec `true` round trip median "
        f"{statistics.median(round_trips) * 1000:.0f} ms over {len(round_trips)}"
    )


async def _agent_session(
    argv: list[str], port: int, console: Path
) -> tuple[float, dict[str, str], list[float]]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    started = time.monotonic()
    exited = asyncio.ensure_future(proc.wait())
    try:
        while not await agent_protocol.ping(AGENT_HOST, port, 2.0):
            if time.monotonic() - started > PING_TIMEOUT_SECONDS or exited.done():
                tail = console.read_text(errors="replace")[-3000:] if console.exists() else ""
                raise guest_image.BootError(f"no ping from the arm64 guest; console ends:\n{tail}")
            await asyncio.wait({exited}, timeout=1.0)
        boot = time.monotonic() - started
        outputs = {}
        for command in (
            "uname -m",
            "cat /proc/version",
            "cat /sys/bus/virtio/devices/*/modalias | sort -u | wc -l",
        ):
            code, out = await _exec(port, command)
            assert code == 0, out
            outputs[command] = out.strip()
        round_trips = []
        for _ in range(5):
            t0 = time.monotonic()
            code, _ = await _exec(port, "true")
            round_trips.append(time.monotonic() - t0)
            assert code == 0
        return boot, outputs, round_trips
    finally:
        if proc.returncode is None:
            proc.kill()
        await exited


async def _exec(port: int, command: str) -> tuple[int, str]:
    """One command through the guest agent's exec (as the fake flintlockd relays it)."""
    start = microvmexec_pb2.ExecStart(uid="arm64", cmd="sh", args=["-c", command])
    conn = await agent_protocol.open_exec(AGENT_HOST, port, start, 10.0)
    out = b""
    try:
        while (frame := await conn.receive()) is not None:
            kind, payload = frame
            if kind == agent_protocol.Frame.STDOUT:
                out += payload
            elif kind == agent_protocol.Frame.EXIT:
                return agent_protocol.exit_code(payload), out.decode()
    finally:
        await conn.close()
    raise guest_image.BootError(f"the agent closed the exec of {command!r} without an exit")
