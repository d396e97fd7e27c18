"""QEMU's command line for a guest (GI-100, GI-103): Firecracker's device model on both
architectures (every device on virtio-mmio, the kernel given with -kernel, no firmware, no
initramfs), and the time source an amd64 guest under QEMU's emulator is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from batteryop.testing import guest_image


def _devices(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == "-device"]


@pytest.mark.req("GI-100", "GI-005")
def test_amd64_boots_on_microvm_with_every_device_on_virtio_mmio() -> None:
    argv = guest_image.qemu_command(Path("/k"), Path("/d"), "kvm", forwards=((5000, 1024),))
    assert argv[0] == "qemu-system-x86_64"
    assert argv[argv.index("-M") + 1].startswith("microvm,")
    devices = _devices(argv)
    assert devices == [
        "virtio-blk-device,drive=root",
        "virtio-net-device,netdev=mmds",
        "virtio-net-device,netdev=lan",
    ]
    assert not any("pci" in arg for arg in argv)
    assert "-initrd" not in argv and argv[argv.index("-kernel") + 1] == "/k"
    append = argv[argv.index("-append") + 1]
    assert "console=ttyS0" in append and "root=/dev/vda rw" in append
    assert "tsc_early_khz" not in append  # KVM gives the guest kvm-clock
    assert any(",hostfwd=tcp:127.0.0.1:5000-:1024" in arg for arg in argv)


@pytest.mark.req("GI-103")
def test_arm64_boots_on_virt_with_a_virtio_console() -> None:
    argv = guest_image.qemu_command(
        Path("/Image"), Path("/d"), "tcg", arch="arm64", serial="file:/tmp/console.log"
    )
    assert argv[0] == "qemu-system-aarch64"
    assert argv[argv.index("-M") + 1].startswith("virt")
    assert argv[argv.index("-cpu") + 1] == "cortex-a72"
    devices = _devices(argv)
    assert "virtconsole,chardev=console" in devices
    # virt's guest names its virtio-mmio devices last to first: lan must come first to be eth1.
    assert devices[-3:] == [
        "virtio-net-device,netdev=lan",
        "virtio-net-device,netdev=mmds",
        "virtio-blk-device,drive=root",
    ]
    assert "file,path=/tmp/console.log,id=console" in argv
    assert not any("pci" in arg for arg in argv)
    append = argv[argv.index("-append") + 1]
    assert "console=hvc0" in append and "tsc_early_khz" not in append


def test_an_amd64_guest_under_the_emulator_is_told_this_machines_tsc_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2596.140\nprocessor\t: 1\ncpu MHz\t: 1.0\n")
    assert guest_image.host_tsc_khz(cpuinfo) == 2596140
    assert guest_image.host_tsc_khz(tmp_path / "missing") is None
    monkeypatch.setattr(guest_image, "host_tsc_khz", lambda: 2596140)
    argv = guest_image.qemu_command(Path("/k"), Path("/d"), "tcg")
    assert "tsc_early_khz=2596140" in argv[argv.index("-append") + 1]
    assert guest_image.tcg_kernel_args("arm64", "tcg") == []
    with pytest.raises(guest_image.BootError, match=r"must be one of \['amd64', 'arm64'\]"):
        guest_image.qemu_command(Path("/k"), Path("/d"), arch="riscv64")
