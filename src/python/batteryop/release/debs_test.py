"""The Debian package lock and the cache checks (DP-105), without the network."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from batteryop.release import debs


@pytest.mark.req("DP-105")
def test_the_lock_pins_the_listed_packages_for_both_architectures_by_sha256() -> None:
    lock = debs.load_lock()
    wanted = debs.read_package_list()
    for arch in ("amd64", "arm64"):
        pinned = lock.for_arch(arch)
        assert [d.package for d in pinned] == wanted
        for d in pinned:
            assert d.architecture in (arch, "all"), d
            assert len(d.sha256) == 64 and d.size > 0, d
    # The same architecture-independent package is the same file on both sides.
    amd = {d.package: d for d in lock.for_arch("amd64")}
    for d in lock.for_arch("arm64"):
        if d.architecture == "all":
            assert amd[d.package].sha256 == d.sha256


@pytest.mark.req("DP-105")
def test_a_bad_lock_entry_is_named_with_its_field(tmp_path: Path) -> None:
    entry = {
        "package": "libc6",
        "version": "2.36",
        "architecture": "amd64",
        "filename": "libc6_2.36_amd64.deb",
        "size": 1,
        "sha256": "XYZ",
    }
    path = tmp_path / "lock.json"
    path.write_text(json.dumps({"architectures": {"amd64": [entry]}}))
    with pytest.raises(debs.DebError, match=r"architectures\.amd64\[0\]\.sha256 must be 64"):
        debs.load_lock(path)
    entry["sha256"], entry["size"] = "a" * 64, "1"
    path.write_text(json.dumps({"architectures": {"amd64": [entry]}}))
    with pytest.raises(debs.DebError, match=r"architectures\.amd64\[0\]\.size must be a int"):
        debs.load_lock(path)
    with pytest.raises(debs.DebError, match="no architecture 'arm64'"):
        debs.Lock({}).for_arch("arm64")


@pytest.mark.req("DP-105")
def test_a_cached_file_that_fails_its_sha256_is_removed_and_refused(tmp_path: Path) -> None:
    good = b"a real package"
    sha = hashlib.sha256(good).hexdigest()
    deb = debs.Deb("p", "1", "amd64", "p_1_amd64.deb", len(good), sha)
    (tmp_path / f"{sha}.deb").write_bytes(good)
    assert debs.fetch([deb], cache=tmp_path) == [tmp_path / f"{sha}.deb"]
    (tmp_path / f"{sha}.deb").write_bytes(b"tampered")
    with pytest.raises(debs.DebError, match="failed its sha256 check"):
        debs.fetch([deb], cache=tmp_path)
    assert not (tmp_path / f"{sha}.deb").exists()
