"""The Host Image's build scripts, run here on what they can run on: fetch.sh's checksum gate
(on local files), build.sh and publish-ami.sh refusing placeholders and printing their commands
with --dry-run, and the check stage (check.sh) against a tree with stand-in binaries."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from images.hostfs import HOST, ROOTFS, python_root, read_env

FAKE_SUM = "ab" * 32
DIGEST = "sha256:" + "cd" * 32


def _copy(tmp_path: Path, pins: dict[str, str] | None = None) -> Path:
    """A copy of the definition, with every PIN-ME filled (or with `pins`)."""
    copy = tmp_path / "host"
    shutil.copytree(HOST, copy)
    text = (copy / "versions.env").read_text().replace("PIN-ME", FAKE_SUM)
    for key, value in (pins or {}).items():
        text = (
            "\n".join(
                f"{key}={value}" if line.startswith(f"{key}=") else line
                for line in text.splitlines()
            )
            + "\n"
        )
    (copy / "versions.env").write_text(text)
    return copy


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *map(str, argv)], capture_output=True, text=True, timeout=60)


@pytest.mark.req("HI-004", by="definition")
def test_a_placeholder_pin_stops_the_build_naming_the_key() -> None:
    done = _run(HOST / "build.sh", "--arch", "amd64", "--dry-run")
    assert done.returncode == 1
    assert "versions.env: BASE_IMAGE" not in done.stderr
    assert "BASE_DIGEST is not pinned" in done.stderr


@pytest.mark.req("HI-001", "HI-002", by="definition")
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_build_passes_the_pinned_base_and_versions(tmp_path: Path, arch: str) -> None:
    copy = _copy(tmp_path)
    done = _run(copy / "build.sh", "--arch", arch, "--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # Reproducible: the image's times are fixed (buildah 1.28 ignores SOURCE_DATE_EPOCH).
    assert f"--platform linux/{arch} --timestamp 0 " in out
    assert (
        f"--build-arg BASE=ghcr.io/phoban01/battery-operator/fedora-bootc@sha256:{FAKE_SUM}" in out
    )
    assert "--build-arg KUBERNETES_VERSION=v1.36.3" in out


def _fake_release(tmp_path: Path, arch: str) -> tuple[Path, dict[str, str]]:
    """Files named as the releases are, holding stand-in binaries, and their sha256."""
    uarch = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
    src = tmp_path / "src"
    src.mkdir()
    stage = tmp_path / "stage"
    (stage / "bin").mkdir(parents=True)
    (stage / f"release-v1.16.1-{uarch}").mkdir()
    for name in ("containerd", "containerd-shim-runc-v2", "ctr"):
        (stage / "bin" / name).write_text("#!/bin/sh\n")
    for name in ("firecracker", "jailer"):
        (stage / f"release-v1.16.1-{uarch}" / f"{name}-v1.16.1-{uarch}").write_text("#!/bin/sh\n")
    subprocess.run(
        ["tar", "-czf", src / f"containerd-2.2.9-linux-{arch}.tar.gz", "-C", stage, "bin"],
        check=True,
    )
    subprocess.run(
        [
            "tar",
            "-czf",
            src / f"firecracker-v1.16.1-{uarch}.tgz",
            "-C",
            stage,
            f"release-v1.16.1-{uarch}",
        ],
        check=True,
    )
    (src / f"runc.{arch}").write_text("#!/bin/sh\n")
    (src / ("cloud-hypervisor-static" + ("-aarch64" if arch == "arm64" else ""))).write_text(
        "#!/bin/sh\n"
    )
    (src / f"flintlockd_{arch}").write_text("#!/bin/sh\n")
    files = {
        "CONTAINERD": f"containerd-2.2.9-linux-{arch}.tar.gz",
        "RUNC": f"runc.{arch}",
        "FIRECRACKER": f"firecracker-v1.16.1-{uarch}.tgz",
        "CLOUD_HYPERVISOR": "cloud-hypervisor-static" + ("-aarch64" if arch == "arm64" else ""),
        "FLINTLOCK": f"flintlockd_{arch}",
    }
    sums = {
        f"{key}_SHA256_{arch}": hashlib.sha256((src / name).read_bytes()).hexdigest()
        for key, name in files.items()
    }
    return src, sums


@pytest.mark.req("HI-003", "HI-004", "HI-007", by="definition")
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_fetch_installs_every_binary_whose_checksum_matches(tmp_path: Path, arch: str) -> None:
    src, sums = _fake_release(tmp_path, arch)
    copy = _copy(tmp_path, sums)
    out = tmp_path / "out"
    done = _run(
        copy / "build/fetch.sh",
        "--arch",
        arch,
        "--versions",
        copy / "versions.env",
        "--out",
        out,
        "--from",
        src,
    )
    assert done.returncode == 0, done.stderr
    installed = sorted(p.name for p in (out / "usr/bin").iterdir())
    assert installed == sorted(
        [
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "runc",
            "firecracker",
            "jailer",
            "cloud-hypervisor-static",
            "flintlockd",
        ]
    )
    assert all(os.access(p, os.X_OK) for p in (out / "usr/bin").iterdir())


@pytest.mark.req("HI-004", by="definition")
def test_fetch_fails_on_a_checksum_mismatch(tmp_path: Path) -> None:
    src, sums = _fake_release(tmp_path, "amd64")
    (src / "runc.amd64").write_text("#!/bin/sh\necho tampered\n")
    copy = _copy(tmp_path, sums)
    done = _run(
        copy / "build/fetch.sh",
        "--arch",
        "amd64",
        "--versions",
        copy / "versions.env",
        "--out",
        tmp_path / "out",
        "--from",
        src,
    )
    assert done.returncode != 0
    assert "RUNC runc.amd64: sha256 is" in done.stderr
    assert f"versions.env pins {sums['RUNC_SHA256_amd64']}" in done.stderr


@pytest.mark.req("HI-009", by="definition")
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_the_ami_dry_run_names_and_tags_the_ami_with_its_architecture(
    tmp_path: Path, arch: str
) -> None:
    copy = _copy(tmp_path)
    image = f"ghcr.io/phoban01/battery-operator/host-image@{DIGEST}"
    done = _run(
        copy / "publish-ami.sh",
        "--dry-run",
        "--arch",
        arch,
        "--image",
        image,
        "--bucket",
        "images",
        "--region",
        "eu-west-1",
    )
    assert done.returncode == 0, done.stderr
    uarch = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
    assert f"--target-arch {uarch}" in done.stdout
    assert f"--aws-ami-name battery-host-image-{arch}-{'cd' * 6}" in done.stdout
    assert f"Key=battery.liquidmetal-x.dev/architecture,Value={arch}" in done.stdout
    assert f"Key=battery.liquidmetal-x.dev/image-digest,Value={DIGEST}" in done.stdout
    assert "Key=battery.liquidmetal-x.dev/kubernetes-version,Value=v1.36.3" in done.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--arch", "riscv64"], "--arch must be amd64 or arm64"),
        (["--arch", "amd64", "--image", "ghcr.io/x:latest"], "--image must be pinned by digest"),
        (["--arch", "amd64", "--image", f"x@{DIGEST}"], "--bucket is required"),
    ],
)
def test_the_ami_script_refuses_bad_arguments_in_one_line(args: list[str], error: str) -> None:
    done = _run(HOST / "publish-ami.sh", *args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"publish-ami.sh: {error}" or error in done.stderr


def _image_tree(tmp_path: Path, versions: dict[str, str], lie: str = "") -> Path:
    """A tree shaped as the built image, with stand-ins that report the pinned versions."""
    root = tmp_path / "image"
    shutil.copytree(ROOTFS, root, symlinks=True)
    shutil.copy(HOST / "versions.env", root / "usr/share/battery/versions.env")
    (root / "usr/lib/battery").mkdir(parents=True, exist_ok=True)
    shutil.copytree(python_root() / "batteryop", root / "usr/lib/battery/python/batteryop")
    reports = {
        "containerd": f"containerd github.com/containerd/containerd/v2 {versions['CONTAINERD_VERSION']} abc",
        "runc": f"runc version {versions['RUNC_VERSION'][1:]}",
        "firecracker": f"Firecracker {versions['FIRECRACKER_VERSION']}",
        "jailer": f"Jailer {versions['FIRECRACKER_VERSION']}",
        "cloud-hypervisor-static": f"cloud-hypervisor {versions['CLOUD_HYPERVISOR_VERSION']}",
        "flintlockd": f"{versions['FLINTLOCK_VERSION'][1:]}",
        "kubelet": f"Kubernetes {versions['KUBERNETES_VERSION']}",
        "kubeadm": versions["KUBERNETES_VERSION"],
        "cloud-init": f"/usr/bin/cloud-init {versions['CLOUD_INIT_VERSION']}",
    }
    if lie:
        reports[lie] = "0.0.1"
    for name, report in reports.items():
        stub = root / "usr/bin" / name
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(f"#!/bin/sh\necho '{report}'\n")
        stub.chmod(0o755)
    # The kubelet RPM's unit, which the preset enables.
    (root / "usr/lib/systemd/system/kubelet.service").write_text(
        "[Service]\nExecStart=/usr/bin/kubelet\n[Install]\nWantedBy=multi-user.target\n"
    )
    (root / "var").mkdir(exist_ok=True)
    (root / "usr/libexec").mkdir(exist_ok=True)
    (root / "opt").symlink_to("/var/opt")
    (root / "usr/local").symlink_to("/var/usrlocal")
    (root / "usr/libexec/kubernetes").symlink_to("/var/libexec/kubernetes")
    # What build/configure.sh does with the preset: enable every unit it names.
    subprocess.run(["systemctl", f"--root={root}", "preset-all"], check=True, capture_output=True)
    subprocess.run(
        ["systemctl", f"--root={root}", "mask", "bootc-fetch-apply-updates.timer"],
        check=True,
        capture_output=True,
    )
    return root


@pytest.mark.req("HI-008", "HI-082", "HI-081", "HI-062", "HI-006", by="definition")
def test_the_check_stage_passes_on_a_complete_image(tmp_path: Path) -> None:
    versions = read_env(HOST / "versions.env")
    root = _image_tree(tmp_path, versions)
    done = subprocess.run(
        ["bash", HOST / "build/check.sh", "--root", root], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "passed every check" in done.stderr


@pytest.mark.req("HI-008", by="definition")
def test_the_check_stage_fails_on_a_wrong_version_a_disabled_unit_or_a_shipped_key(
    tmp_path: Path,
) -> None:
    versions = read_env(HOST / "versions.env")
    root = _image_tree(tmp_path, versions, lie="flintlockd")
    subprocess.run(
        ["systemctl", f"--root={root}", "disable", "battery-network.service"],
        check=True,
        capture_output=True,
    )
    (root / "etc/battery/leaked.pem").parent.mkdir(parents=True, exist_ok=True)
    (root / "etc/battery/leaked.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    done = subprocess.run(
        ["bash", HOST / "build/check.sh", "--root", root], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "flintlockd: reports '0.0.1', versions.env pins 0.16.0" in done.stderr
    assert "battery-network.service is disabled, not enabled" in done.stderr
    assert "private keys in the image" in done.stderr
    assert "check: 3 failure(s)" in done.stderr
