"""GI-030, GI-032: the Debian guest root filesystem, built here for amd64 and arm64, packed as
one OCI image index with the release images' buildah recipe; each architecture's layer,
unpacked again, passes the image's check stage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from images.hostfs import have

from batteryop.release import guest_agent, guest_rootfs, oci
from batteryop.release.version import Version

GUEST = Path("src/images/guest")
ELF_MACHINE = {"amd64": b"\x3e\x00", "arm64": b"\xb7\x00"}
CREATED = 1767225600  # 2026-01-01T00:00:00Z
VERSION = Version(python="", image_tag="t", revision="", created=0)


def _tree(arch: str, out: Path) -> Path:
    done = subprocess.run(
        [
            "bash",
            str(GUEST / "debian/build-rootfs.sh"),
            "--arch",
            arch,
            "--out",
            str(out),
            "--guest-agent",
            str(guest_agent.ensure_agent(arch).folder),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.req("GI-030", "GI-032", "GI-013", "GI-011", "GI-026", "GI-010")
def test_the_debian_rootfs_is_one_image_for_amd64_and_arm64(tmp_path: Path) -> None:
    for tool in ("apt-get", "dpkg-deb", "systemctl", "tar", "buildah"):
        have(tool)
    trees = {arch: _tree(arch, tmp_path / f"tree-{arch}") for arch in ("amd64", "arm64")}
    layout = tmp_path / "layout"
    version = Version(python="", image_tag="v0.0.0-test", revision="0" * 40, created=CREATED)
    digest = guest_rootfs.build(trees, layout, version)
    assert digest == oci.index_digest(layout, "v0.0.0-test")

    manifests = oci.platform_manifests(layout, "v0.0.0-test")
    assert sorted(manifests) == ["amd64", "arm64"]
    for arch, manifest in manifests.items():
        (layer,) = manifest["layers"]  # one layer: the tree
        image_config = json.loads(oci.blob(layout, manifest["config"]["digest"]))
        assert image_config["architecture"] == arch
        assert image_config["config"]["Entrypoint"] == ["/sbin/init"]
        assert image_config["config"]["User"] == "0:0"
        assert image_config["created"] == "2026-01-01T00:00:00Z"
        # GI-010: what it is, where the release notes say Ubuntu.
        labels = image_config["config"]["Labels"]
        assert labels["org.opencontainers.image.description"].startswith("Debian 12 ")
        assert labels["org.opencontainers.image.title"] == "guest-rootfs"
        root = tmp_path / f"unpacked-{arch}"
        root.mkdir()
        blob = layout / "blobs" / "sha256" / layer["digest"].removeprefix("sha256:")
        subprocess.run(["tar", "-xzf", str(blob), "-C", str(root)], check=True)
        # The image's own check stage, on what a pull of the image gives.
        done = subprocess.run(
            ["sh", str(GUEST / "rootfs/check-rootfs.sh"), "--root", str(root)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert (root / "etc/machine-id").read_text() == ""
        assert (root / "bin").readlink() == Path("usr/bin")
        bash = (root / "usr/bin/bash").read_bytes()[:20]
        assert bash[:4] == b"\x7fELF" and bash[18:20] == ELF_MACHINE[arch]
        assert (
            root / "etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
        ).is_symlink()


def test_a_tree_that_is_not_a_rootfs_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--tree amd64=.*not a guest root filesystem"):
        guest_rootfs.build({"amd64": tmp_path}, tmp_path / "out", VERSION)
    with pytest.raises(ValueError, match=r"--tree: architecture must be one of"):
        guest_rootfs.build({"riscv64": tmp_path}, tmp_path / "out", VERSION)
    assert guest_rootfs.main(["--tree", "amd64", "--out", str(tmp_path), "--tag", "t"]) == 1
