"""The guest images' definitions: the kernel format and config checks, the build script's pins,
and a guest root filesystem built here from Debian's packages for amd64 and arm64 with the same
files and configuration as the Ubuntu image, checked by the image's own check stage."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from images.hostfs import have

from batteryop.release import guest_agent

GUEST = Path("src/images/guest")
FAKE_SUM = "ef" * 32
ELF_MACHINE = {"amd64": b"\x3e\x00", "arm64": b"\xb7\x00"}


def _sh(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*map(str, argv)], capture_output=True, text=True, timeout=600)


def _elf(path: Path, machine: bytes) -> Path:
    header = bytearray(64)
    header[0:4] = b"\x7fELF"
    header[4] = 2
    header[18:20] = machine
    path.write_bytes(bytes(header) + b"\0" * 1024)
    return path


def _arm64_image(path: Path) -> Path:
    header = bytearray(64)
    header[56:60] = b"ARM\x64"
    path.write_bytes(bytes(header) + b"\0" * 1024)
    return path


@pytest.mark.req("GI-002", "GI-032", by="definition")
def test_the_kernel_check_takes_each_architectures_format_and_refuses_the_other(
    tmp_path: Path,
) -> None:
    check = GUEST / "kernel/check-kernel.sh"
    vmlinux = _elf(tmp_path / "vmlinux", ELF_MACHINE["amd64"])
    image = _arm64_image(tmp_path / "Image")
    arm_elf = _elf(tmp_path / "arm-elf", ELF_MACHINE["arm64"])
    assert _sh("sh", check, "amd64", vmlinux).returncode == 0
    assert _sh("sh", check, "arm64", image).returncode == 0
    assert (
        _sh("sh", check, "arm64", vmlinux).stderr
        == f"check-kernel: {vmlinux} is not an arm64 Image\n"
    )
    assert _sh("sh", check, "amd64", image).stderr == f"check-kernel: {image} is not an ELF file\n"
    assert (
        _sh("sh", check, "amd64", arm_elf).stderr
        == f"check-kernel: {arm_elf} is not built for x86-64\n"
    )
    (tmp_path / "empty").write_bytes(b"")
    assert _sh("sh", check, "amd64", tmp_path / "empty").returncode == 1


@pytest.mark.req("GI-004", "GI-005", by="definition")
def test_the_kernel_config_check_needs_every_option_built_in(tmp_path: Path) -> None:
    fragment = GUEST / "kernel/config-fragment"
    wanted = [line for line in fragment.read_text().splitlines() if line.startswith("CONFIG_")]
    assert {
        "CONFIG_VIRTIO_BLK=y",
        "CONFIG_VIRTIO_VSOCKETS=y",
        "CONFIG_EXT4_FS=y",
        "CONFIG_DEVTMPFS=y",
    } <= set(wanted)
    assert "CONFIG_VIRTIO_PCI=y" not in wanted
    config = tmp_path / ".config"
    config.write_text("\n".join(["CONFIG_64BIT=y", *wanted]) + "\n")
    assert _sh("sh", GUEST / "kernel/check-config.sh", fragment, config).returncode == 0
    config.write_text(
        "\n".join(w.replace("CONFIG_EXT4_FS=y", "CONFIG_EXT4_FS=m") for w in wanted) + "\n"
    )
    done = _sh("sh", GUEST / "kernel/check-config.sh", fragment, config)
    assert done.returncode == 1
    assert done.stderr == f"check-config: {config} lacks CONFIG_EXT4_FS=y\n"


@pytest.mark.req("GI-031", by="definition")
def test_a_placeholder_pin_stops_the_guest_build() -> None:
    done = _sh("bash", GUEST / "build.sh", "rootfs", "--arch", "amd64", "--dry-run")
    assert done.returncode == 1
    assert "is not pinned" in done.stderr


@pytest.mark.req("GI-001", by="definition")
def test_the_kernel_has_no_containerfile_build_and_says_where_it_is_built() -> None:
    done = _sh("bash", GUEST / "build.sh", "kernel", "--arch", "arm64", "--dry-run")
    assert done.returncode == 2
    assert "./pants package src/images/guest:guest-kernel" in done.stderr
    assert "python -m batteryop.release.guest_kernel build --arch arm64" in done.stderr


@pytest.mark.req("GI-010", "GI-020", "GI-031", by="definition")
def test_the_rootfs_build_pins_ubuntu_and_the_guest_agent(tmp_path: Path) -> None:
    copy = tmp_path / "guest"
    shutil.copytree(GUEST, copy)
    versions = copy / "rootfs/versions.env"
    versions.write_text(versions.read_text().replace("PIN-ME", FAKE_SUM))
    done = _sh("bash", copy / "build.sh", "rootfs", "--arch", "arm64", "--created", "1767225600",
               "--dry-run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Reproducible: the image's times are fixed (buildah 1.28 ignores SOURCE_DATE_EPOCH).
    assert "--platform linux/arm64 --timestamp 1767225600 " in done.stdout
    assert f"BASE=docker.io/library/ubuntu:24.04@sha256:{FAKE_SUM}" in done.stdout
    assert "guest-agent/v0.4.0/guest-agent_0.4.0_linux_arm64.deb" in done.stdout
    assert f"GUEST_AGENT_SHA256={FAKE_SUM}" in done.stdout


@pytest.fixture(scope="module", params=["amd64", "arm64"])
def debian_rootfs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    for tool in ("apt-get", "dpkg-deb", "systemctl"):
        have(tool)
    arch = request.param
    out = tmp_path_factory.mktemp(f"rootfs-{arch}") / "root"
    agent = guest_agent.ensure_agent(arch).folder
    done = _sh(
        "bash",
        GUEST / "debian/build-rootfs.sh",
        "--arch",
        arch,
        "--out",
        out,
        "--guest-agent",
        agent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    yield arch, out
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.req(
    "GI-011", "GI-012", "GI-013", "GI-014", "GI-022", "GI-023", "GI-024", "GI-025", "GI-032"
)
def test_the_debian_rootfs_passes_the_images_check(debian_rootfs: tuple[str, Path]) -> None:
    arch, root = debian_rootfs
    done = _sh("sh", GUEST / "rootfs/check-rootfs.sh", "--root", root)
    assert done.returncode == 0, done.stderr
    assert "no guest agent" not in done.stderr
    # The tree is of its architecture: its shell is an ELF for that machine.
    bash = (root / "bin/bash").read_bytes()[:20]
    assert bash[:4] == b"\x7fELF" and bash[18:20] == ELF_MACHINE[arch]
    assert (root / "etc/machine-id").read_text() == ""
    assert (
        root / "etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
    ).is_symlink()
    assert (root / "usr/lib/tmpfiles.d/guest-resolv.conf").is_file()


@pytest.mark.req("GI-020", "GI-026")
def test_the_debian_rootfs_carries_the_guest_agent_built_from_its_pinned_source(
    debian_rootfs: tuple[str, Path],
) -> None:
    arch, root = debian_rootfs
    agent = root / "usr/local/bin/guest-agent"
    head = agent.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and head[18:20] == ELF_MACHINE[arch]
    # Static (CGO_ENABLED=0): no program interpreter, so it needs nothing from the tree's libc.
    assert (
        b"/lib64/ld-linux" not in agent.read_bytes() and b"/lib/ld-linux" not in agent.read_bytes()
    )
    unit = (root / "usr/lib/systemd/system/guest-agent.service").read_text()
    assert "ExecStart=/usr/local/bin/guest-agent" in unit
    wants = root / "etc/systemd/system/multi-user.target.wants/guest-agent.service"
    assert wants.is_symlink()
    if arch == "amd64":  # the machine's own architecture: the binary runs here
        done = _sh(agent, "--version")
        assert done.stdout.strip() == guest_agent.pinned_source().version, done


@pytest.mark.req("GI-027", "GI-014")
def test_the_debian_rootfs_has_sshd_on_loopback_with_no_host_key(
    debian_rootfs: tuple[str, Path],
) -> None:
    arch, root = debian_rootfs
    sshd = (root / "usr/sbin/sshd").read_bytes()[:20]
    assert sshd[:4] == b"\x7fELF" and sshd[18:20] == ELF_MACHINE[arch]
    assert list((root / "etc/ssh").glob("ssh_host_*")) == []
    (account,) = (
        line for line in (root / "etc/passwd").read_text().splitlines() if line.startswith("sshd:")
    )
    assert account.split(":")[5:] == ["/run/sshd", "/usr/sbin/nologin"]
    wants = root / "etc/systemd/system"
    assert (wants / "multi-user.target.wants/ssh.service").is_symlink()
    assert (wants / "ssh.service.wants/ssh-host-key.service").is_symlink()
    unit = (root / "usr/lib/systemd/system/ssh-host-key.service").read_text()
    assert "Before=ssh.service" in unit and "ssh-keygen" in unit
    host_sshd = shutil.which("sshd", path="/usr/sbin:/usr/local/sbin")
    if host_sshd is not None:  # the guest's configuration as sshd reads it (`sshd -T`)
        key = root / "etc/ssh/ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        try:
            config = root / "etc/ssh/sshd_config"
            text = config.read_text().replace("/etc/ssh/", f"{root}/etc/ssh/")
            (root / "sshd_config.test").write_text(text)
            drop_in = (root / "etc/ssh/sshd_config.d/10-battery.conf").read_text()
            (root / "etc/ssh/sshd_config.d/10-battery.conf").write_text(
                drop_in.replace("/etc/ssh/", f"{root}/etc/ssh/")
            )
            done = _sh(host_sshd, "-T", "-f", root / "sshd_config.test")
            (root / "etc/ssh/sshd_config.d/10-battery.conf").write_text(drop_in)
        finally:
            key.unlink()
            key.with_name(key.name + ".pub").unlink()
            (root / "sshd_config.test").unlink(missing_ok=True)
        assert done.returncode == 0, done.stderr
        settings = set(done.stdout.splitlines())
        assert {
            "listenaddress 127.0.0.1:22",
            "passwordauthentication no",
            "kbdinteractiveauthentication no",
            "permitrootlogin without-password",
            f"hostkey {root}/etc/ssh/ssh_host_ed25519_key",
        } <= settings


@pytest.mark.req("GI-032")
def test_the_check_fails_a_rootfs_that_breaks_the_rules(
    debian_rootfs: tuple[str, Path], tmp_path: Path
) -> None:
    _, built = debian_rootfs
    root = tmp_path / "broken"
    shutil.copytree(built / "etc", root / "etc", symlinks=True)
    shutil.copytree(built / "lib/systemd", root / "lib/systemd", symlinks=True)
    (root / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (root / "etc/systemd/network/10-mmds.network").write_text(
        "[Match]\nName=eth0\n[Network]\nDHCP=yes\n"
    )
    shadow = root / "etc/shadow"
    shadow.write_text(shadow.read_text().replace("root:*:", "root:$6$salt$hash:"))
    (root / "etc/ssh/ssh_host_ed25519_key").write_text("baked\n")
    conf = root / "etc/ssh/sshd_config.d/10-battery.conf"
    conf.write_text(conf.read_text().replace("PasswordAuthentication no", "#"))
    subprocess.run(
        [
            "systemctl",
            f"--root={root}",
            "disable",
            "systemd-resolved.service",
            "guest-agent.service",
            "ssh.service",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "SYSTEMCTL_SKIP_SYSV": "1"},  # no update-rc.d in this partial copy
    )
    done = _sh("sh", GUEST / "rootfs/check-rootfs.sh", "--root", root)
    assert done.returncode == 1
    for failure in (
        "/etc/machine-id is not an empty file",
        "systemd-resolved.service is not enabled",
        "guest-agent.service is not enabled",
        "networkd does not leave eth0 alone",
        "/etc/shadow holds a password hash",
        "ssh.service is not enabled",
        "sshd_config.d/10-battery.conf does not say PasswordAuthentication no",
        "an SSH host key is baked in: /etc/ssh/ssh_host_ed25519_key",
    ):
        assert f"check-rootfs: FAIL: {failure}" in done.stderr
