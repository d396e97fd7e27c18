"""The guest kernel's inputs, configuration drift and cache key (GI-001, GI-003, GI-005, GI-031),
without building a kernel: tests/images/guest_kernel_test.py derives and builds for real."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from batteryop.release import guest_kernel
from batteryop.release.guest_kernel import KernelError


def _configs_tarball(folder: Path, *, x86: str = "CONFIG_A=y\n", ci: str = "CONFIG_B=y\n") -> str:
    """A tarball shaped like Firecracker's (resources/guest_configs/...); returns its sha256."""
    path = folder / "firecracker-configs.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (
            ("microvm-kernel-ci-x86_64-6.1.config", x86),
            ("microvm-kernel-ci-aarch64-6.1.config", "CONFIG_ARM=y\n"),
            ("ci.config", ci),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"fc-abc/resources/guest_configs/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """versions.env and overrides.config of our own, pinning a tarball in tmp_path."""
    sha = _configs_tarball(tmp_path)
    versions = tmp_path / "versions.env"
    versions.write_text(
        f"# a comment\nFIRECRACKER_CONFIGS=firecracker-configs.tar.gz\n"
        f"FIRECRACKER_CONFIGS_SHA256={sha}\n"
    )
    overrides = tmp_path / "overrides.config"
    overrides.write_text("# CONFIG_B is not set")  # no final newline: still its own line
    monkeypatch.setattr(guest_kernel, "VERSIONS", versions)
    monkeypatch.setattr(guest_kernel, "OVERRIDES", overrides)
    monkeypatch.setenv("BATTERYOP_THIRD_PARTY", str(tmp_path))
    return tmp_path


@pytest.mark.req("GI-003", "GI-005")
def test_the_configuration_is_firecrackers_then_its_fragment_then_ours(pins: Path) -> None:
    configs = guest_kernel.unpack_configs(pins / "unpacked")
    text = guest_kernel.assembled("amd64", configs)
    # olddefconfig keeps the last assignment of a symbol: ours wins over Firecracker's fragment.
    assert text == "CONFIG_A=y\nCONFIG_B=y\n# CONFIG_B is not set\n"
    assert guest_kernel.assembled("arm64", configs).startswith("CONFIG_ARM=y\n")


@pytest.mark.req("GI-031")
def test_an_altered_or_missing_configuration_tarball_is_refused(pins: Path) -> None:
    (pins / "firecracker-configs.tar.gz").write_bytes(b"not the pinned tarball")
    with pytest.raises(
        KernelError, match=r"firecracker-configs.tar.gz: sha256 [0-9a-f]{64}, pinned"
    ):
        guest_kernel.unpack_configs(pins / "unpacked")
    (pins / "firecracker-configs.tar.gz").unlink()
    with pytest.raises(KernelError, match="not found: set BATTERYOP_THIRD_PARTY"):
        guest_kernel.unpack_configs(pins / "unpacked")


def test_versions_without_the_pin_name_it(tmp_path: Path) -> None:
    versions = tmp_path / "versions.env"
    versions.write_text("FIRECRACKER_CONFIGS=x.tar.gz\n")
    with pytest.raises(KernelError, match="pins no FIRECRACKER_CONFIGS_SHA256"):
        guest_kernel.configs_tarball(versions)


def test_an_unknown_architecture_is_refused_by_name() -> None:
    with pytest.raises(
        KernelError, match=r"--arch must be one of \['amd64', 'arm64'\], not 'riscv64'"
    ):
        guest_kernel.machine("riscv64")
    assert guest_kernel.main(["build", "--arch", "riscv64"]) == 1


@pytest.mark.req("GI-001")
def test_drift_from_the_checked_in_configuration_is_shown_with_the_fix() -> None:
    checked_in = guest_kernel.checked_in_config("amd64").read_text()
    assert guest_kernel.config_drift("amd64", checked_in) == []
    derived = checked_in.replace("CONFIG_EXT4_FS=y", "CONFIG_EXT4_FS=m")
    diff = guest_kernel.config_drift("amd64", derived)
    assert "-CONFIG_EXT4_FS=y" in diff and "+CONFIG_EXT4_FS=m" in diff
    message = str(guest_kernel.drift_error("amd64", diff))
    assert "src/images/guest/kernel/config-amd64" in message
    assert "guest_kernel config --arch amd64 --write" in message


@pytest.mark.req("GI-005")
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_the_checked_in_configuration_has_virtio_mmio_and_no_virtio_pci(arch: str) -> None:
    lines = set(guest_kernel.checked_in_config(arch).read_text().splitlines())
    assert "CONFIG_VIRTIO_MMIO=y" in lines
    assert "# CONFIG_VIRTIO_PCI is not set" in lines
    # Built in, so no initrd is needed for the root volume and the agent (GI-004).
    required = guest_kernel.REQUIRED.read_text().splitlines()
    assert {line for line in required if line.startswith("CONFIG_")} <= lines


def test_the_cache_key_follows_every_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(guest_kernel, "compiler_version", lambda m: "gcc (Debian 12.2.0) 12.2.0")
    first = guest_kernel.cache_key("amd64")
    assert first == guest_kernel.cache_key("amd64")
    assert first != guest_kernel.cache_key("arm64")
    monkeypatch.setattr(guest_kernel, "compiler_version", lambda m: "gcc (Debian 13.1.0) 13.1.0")
    assert guest_kernel.cache_key("amd64") != first
    monkeypatch.setattr(guest_kernel, "compiler_version", lambda m: "gcc (Debian 12.2.0) 12.2.0")
    overrides = tmp_path / "overrides.config"
    overrides.write_text(guest_kernel.OVERRIDES.read_text() + "CONFIG_X=y\n")
    monkeypatch.setattr(guest_kernel, "OVERRIDES", overrides)
    assert guest_kernel.cache_key("amd64") != first


@pytest.mark.req("GI-033")
def test_the_build_timestamp_is_the_source_changelogs_newest_date() -> None:
    changelog = (
        "linux (6.1.192-3) bookworm-security; urgency=high\n\n  * A fix.\n\n"
        " -- Salvatore Bonaccorso <carnil@debian.org>  Thu, 26 Nov 2026 18:12:56 +0100\n\n"
        "linux (6.1.192-2) bookworm-security; urgency=high\n\n"
        " -- Ben Hutchings <benh@debian.org>  Mon, 23 Nov 2026 10:00:00 +0100\n"
    )
    # A date `date -d` reads: the built-in initramfs' file times come from it.
    assert guest_kernel.changelog_date(changelog) == "Thu, 26 Nov 2026 18:12:56 +0100"
    with pytest.raises(KernelError, match="no dated entry"):
        guest_kernel.changelog_date("linux (1) x; urgency=low\n")
