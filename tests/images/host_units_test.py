"""Every unit of the Host Image passes `systemd-analyze verify` against the image's own tree:
the rootfs, on top of this machine's systemd units (standing in for the base image's), with
stand-ins for what the image's packages and downloads install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from images.hostfs import IMAGE_ENV, ROOTFS, have, read_env

UNITS = ROOTFS / "usr/lib/systemd/system"
# What the image installs besides the rootfs (build/fetch.sh, build/packages.sh).
INSTALLED = [
    "usr/bin/flintlockd",
    "usr/bin/containerd",
    "usr/bin/firecracker",
    "usr/bin/cloud-hypervisor-static",
    "usr/bin/kubelet",
    "usr/sbin/dnsmasq",
    "usr/sbin/modprobe",
    "usr/bin/systemctl",
]
# Units of the image's packages that ours order against (cloud-init's, the kubelet RPM's).
PACKAGE_UNITS = {
    "cloud-config.service": "[Service]\nType=oneshot\nExecStart=/usr/bin/true\n",
    "kubelet.service": "[Service]\nExecStart=/usr/bin/kubelet\n",
    "lvm2-monitor.service": "[Service]\nType=oneshot\nExecStart=/usr/bin/true\n",
}


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("image")
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for name in ("bin", "sbin", "lib", "lib64"):
        (root / name).symlink_to(f"usr/{name}")
    shutil.copytree(ROOTFS, root, dirs_exist_ok=True, symlinks=True)
    for path in [*INSTALLED, "usr/bin/true"]:
        stub = root / path
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    for name, text in PACKAGE_UNITS.items():
        (root / "usr/lib/systemd/system" / name).write_text(f"[Unit]\nDescription={name}\n{text}")
    for script in (root / "usr/libexec/battery").glob("*.sh"):
        script.chmod(0o755)
    return root


def ours() -> list[str]:
    return sorted(p.name for p in UNITS.iterdir() if p.is_file())


@pytest.mark.req("HI-040", "HI-041", "HI-071", "HI-073")
@pytest.mark.parametrize("unit", ours())
def test_the_unit_passes_systemd_analyze_verify(image_root: Path, unit: str) -> None:
    have("systemd-analyze")
    done = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            f"--root={image_root}",
            str(image_root / "usr/lib/systemd/system" / unit),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_the_kubelet_drop_in_passes_verify_with_the_kubelet_unit(image_root: Path) -> None:
    done = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            f"--root={image_root}",
            str(image_root / "usr/lib/systemd/system/kubelet.service"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr.strip()) == (0, "")


@pytest.mark.req("HI-041", "HI-071", "HI-073", "HI-081", "HI-043", "HI-067", "HI-068")
def test_flintlockd_waits_for_its_gates_and_certificates_and_keeps_hypervisors() -> None:
    unit = (UNITS / "flintlockd.service").read_text()
    for gate in ("battery-kvm.service", "battery-thin-pool.service", "battery-network.service"):
        assert "Requires=" in unit and gate in unit.split("Requires=")[1].splitlines()[0]
    names = read_env(IMAGE_ENV)
    for name in ("tls.crt", "tls.key", "client-ca.crt"):
        assert f"ConditionPathExists={names['FLINTLOCKD_CERT_DIR']}/{name}" in unit
    assert "KillMode=process" in unit
    assert "--tls-client-validate" in unit and "--enable-exec-api" in unit
    assert "--enable-ssh-proxy-api" in unit  # EA-130: `battery shell` through the agent
    assert "--containerd-hosts-dir=${CONTAINERD_HOSTS_DIR}" in unit
    assert "--bridge-name=${BATTERY_BRIDGE}" in unit
    assert "--insecure" not in unit and "--enable-http" not in unit


def test_every_path_a_unit_names_under_run_or_etc_battery_is_one_image_env_defines() -> None:
    names = read_env(IMAGE_ENV)
    defined = set(names.values())
    for unit in sorted(UNITS.rglob("*")):
        if not unit.is_file():
            continue
        lines = [line for line in unit.read_text().splitlines() if not line.startswith("#")]
        for word in " ".join(lines).replace("=", " ").split():
            if word.startswith(("/run/battery", "/etc/battery")):
                assert word in defined or word.rsplit("/", 1)[0] in defined, f"{unit.name}: {word}"
