"""The guest kernel from its pinned inputs (GI-001, GI-003, GI-030, GI-032, GI-033): the
configuration `make olddefconfig` derives from Debian's kernel source, Firecracker's
configuration and our fragment is the one checked in, for amd64 and arm64; the amd64 kernel
(built once per input hash, in CI ahead of the tests by the prebuild) packs into an image
holding only `boot/vmlinux`, and two packings give one digest. The arm64 kernel's build and boot
are the release check's (guest_boot_test.py, BATTERYOP_GUEST_ARM64=1)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from images.hostfs import have

from batteryop.release import guest_kernel, oci
from batteryop.release import main as release_tool
from batteryop.release.version import Version

CREATED = 1767225600  # 2026-01-01T00:00:00Z


@pytest.mark.req("GI-001", "GI-003", "GI-005")
def test_the_checked_in_configurations_are_what_the_pinned_inputs_derive(tmp_path: Path) -> None:
    for tool in ("make", "flex", "bison", "bc", "gcc", "aarch64-linux-gnu-gcc"):
        have(tool)
    started = time.monotonic()
    source = guest_kernel.unpack_source(tmp_path / "source")
    configs = guest_kernel.unpack_configs(tmp_path / "firecracker")
    unpacked = time.monotonic() - started
    for arch in ("amd64", "arm64"):
        derived = guest_kernel.derive_config(arch, source, configs, tmp_path / f"build-{arch}")
        assert guest_kernel.config_drift(arch, derived) == [], arch
    print(f"\nkernel source unpacked in {unpacked:.0f} s; both configurations derived in "
          f"{time.monotonic() - started - unpacked:.0f} s")  # fmt: skip


@pytest.mark.req("GI-002", "GI-030", "GI-032", "GI-033")
def test_the_kernel_image_holds_only_boot_vmlinux_and_builds_the_same_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the release tool's `guest-image`, as `./pants package` runs it (amd64 only)."""
    for tool in ("make", "flex", "bison", "bc", "gcc", "buildah"):
        have(tool)
    started = time.monotonic()
    built = guest_kernel.build("amd64")
    how = "from the cache" if built.cached else f"built in {built.seconds:.0f} s"
    version = Version(python="", image_tag="v0.0.0-test", revision="0" * 40, created=CREATED)
    digests = []
    for out in ("a", "b"):
        argv = ["guest-image", "--kind", "kernel", "--arch", "amd64",
                "--version-json", json.dumps(asdict(version)), "--out", str(tmp_path / out)]  # fmt: skip
        assert release_tool.main(argv) == 0, capsys.readouterr().err
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["name"] == "guest-kernel" and list(summary["sizes"]) == ["amd64"]
        digests.append(summary["digest"])
    first = digests[0]
    assert digests == [first, first] and first == oci.index_digest(tmp_path / "a", "v0.0.0-test")

    (manifest,) = oci.platform_manifests(tmp_path / "a", "v0.0.0-test").values()
    (layer,) = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(oci.blob(tmp_path / "a", layer["digest"]))) as tar:
        files = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
        assert list(files) == [guest_kernel.FILENAME]
        member = files[guest_kernel.FILENAME]
        assert member.mode & 0o777 == 0o644 and member.uid == 0
        data = tar.extractfile(member)
        assert data is not None
        (tmp_path / "vmlinux").write_bytes(data.read())
    assert (tmp_path / "vmlinux").read_bytes() == built.kernel.read_bytes()
    check = subprocess.run(["sh", str(guest_kernel.CHECK_KERNEL), "amd64", str(tmp_path / "vmlinux")],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr
    config = json.loads(oci.blob(tmp_path / "a", manifest["config"]["digest"]))
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.title"] == "guest-kernel"
    assert "Firecracker's CI 6.1 configuration" in labels["org.opencontainers.image.description"]
    assert config["architecture"] == "amd64" and config["created"] == "2026-01-01T00:00:00Z"
    print(f"\namd64 guest kernel {how}: {built.kernel.stat().st_size / 1e6:.1f} MB, sha256 "
          f"{built.sha256[:16]}; image {layer['size'] / 1e6:.1f} MB compressed, {first}; "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
