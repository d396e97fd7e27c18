"""Release versions from git tags (DP-030): the table in batteryop.release.version."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from batteryop.release.version import VersionError, from_describe, from_git

SHA = "abcdef1234567890abcdef1234567890abcdef12"


@pytest.mark.req("DP-030", "DP-106")
@pytest.mark.parametrize(
    ("describe", "python", "tag"),
    [
        ("v0.5.0-0-gabcdef1", "0.5.0", "v0.5.0"),
        ("v0.5.0-rc.1-0-gabcdef1", "0.5.0rc1", "v0.5.0-rc.1"),
        ("v0.5.0-3-gabcdef1", "0.5.1.dev3+gabcdef1", "v0.5.1-dev3.gabcdef1"),
        ("v0.5.0-rc.1-3-gabcdef1", "0.5.0rc2.dev3+gabcdef1", "v0.5.0-rc.2-dev3.gabcdef1"),
        ("", "0.0.1.dev17+gabcdef1", "v0.0.1-dev17.gabcdef1"),
        ("v0.5.0-0-gabcdef1-dirty", "0.5.1.dev0+gabcdef1.dirty", "v0.5.1-dev0.gabcdef1-dirty"),
    ],
)
def test_version_follows_the_last_tag(describe: str, python: str, tag: str) -> None:
    version = from_describe(describe, SHA, 1_700_000_000, commits=17)
    assert (version.python, version.image_tag, version.revision) == (python, tag, SHA)
    assert version.is_release == (python in ("0.5.0", "0.5.0rc1"))


@pytest.mark.req("DP-030")
@pytest.mark.parametrize("tag", ["v1.2", "1.2.3", "v1.2.3-beta", "v1.2.3-pre.1"])
def test_a_tag_not_of_the_release_form_is_refused_by_name(tag: str) -> None:
    with pytest.raises(VersionError, match=f"tag '{tag}' is not v<major>"):
        from_describe(f"{tag}-0-gabcdef1", SHA, 0, commits=1)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.mark.req("DP-106")
def test_from_git_reads_a_real_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "f").write_text("1")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-qm", "one", "--date", "@1700000000")
    subprocess.run(
        ["git", "-C", str(tmp_path), "commit", "-q", "--amend", "--no-edit"],
        check=True,
        env={"GIT_COMMITTER_DATE": "@1700000000", "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    git(tmp_path, "tag", "v1.2.3")
    tagged = from_git(tmp_path)
    assert (tagged.python, tagged.image_tag, tagged.created) == ("1.2.3", "v1.2.3", 1700000000)
    (tmp_path / "f").write_text("2")
    git(tmp_path, "commit", "-qam", "two")
    after = from_git(tmp_path)
    assert after.python.startswith("1.2.4.dev1+g") and not after.is_release
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "42")
    assert from_git(tmp_path).created == 42
