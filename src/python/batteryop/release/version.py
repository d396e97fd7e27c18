"""The release's version, from git: a `v<major>.<minor>.<patch>[-<pre>]` tag on the commit
gives that version; any other commit gets a development version after the last such tag.

| git state                         | `python` (PEP 440)       | `image_tag`             |
|-----------------------------------|--------------------------|-------------------------|
| on tag v0.5.0, clean              | 0.5.0                    | v0.5.0                  |
| on tag v0.5.0-rc.1, clean         | 0.5.0rc1                 | v0.5.0-rc.1             |
| 3 commits after v0.5.0            | 0.5.1.dev3+gabc1234      | v0.5.1-dev3.gabc1234    |
| 3 commits after v0.5.0-rc.1       | 0.5.0rc2.dev3+gabc1234   | v0.5.0-rc.2-dev3.gabc1234 |
| no tag yet (17 commits)           | 0.0.1.dev17+gabc1234     | v0.0.1-dev17.gabc1234   |
| uncommitted changes               | ... +gabc1234.dirty      | ...-dirty               |

`created` is the commit's time, or `SOURCE_DATE_EPOCH` when set, so two builds of one
commit carry the same timestamps (reproducible digests). DP-030: a release is a pushed tag of
that form; `revision` is the full commit SHA.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TAG_PATTERN: Final = re.compile(
    r"^v(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)(?:-(?P<pre>alpha|beta|rc)\.(?P<pre_n>\d+))?$"
)
"""DP-030's version tags: v<major>.<minor>.<patch>, optionally -alpha.N, -beta.N or -rc.N."""
_PEP440_PRE: Final = {"alpha": "a", "beta": "b", "rc": "rc"}


class VersionError(ValueError):
    """The git state cannot give a version."""


@dataclass(frozen=True)
class Version:
    python: str
    """PEP 440 version of the wheel and sdist."""
    image_tag: str
    """OCI tag of the images and the manifests artifact."""
    revision: str
    """The full commit SHA."""
    created: int
    """Seconds since the epoch: the commit's time or SOURCE_DATE_EPOCH."""

    @property
    def is_release(self) -> bool:
        return "dev" not in self.python and "dirty" not in self.python


# DP-106: the distributions' version; DP-030: the tag form.
def from_describe(describe: str, revision: str, created: int, commits: int) -> Version:
    """The version for `git describe --tags --long --dirty` output (empty when no tag)."""
    dirty = describe.endswith("-dirty")
    if dirty:
        describe = describe[: -len("-dirty")]
    short = revision[:7]
    if describe:
        match = re.match(r"^(?P<tag>.+)-(?P<distance>\d+)-g[0-9a-f]+$", describe)
        if match is None:
            raise VersionError(f"git describe gave {describe!r}, not <tag>-<n>-g<sha>")
        tag, distance = match["tag"], int(match["distance"])
    else:
        tag, distance = "v0.0.0", commits
    parts = TAG_PATTERN.match(tag)
    if parts is None:
        raise VersionError(f"tag {tag!r} is not v<major>.<minor>.<patch>[-alpha|beta|rc.<n>]")
    major, minor, patch = int(parts["major"]), int(parts["minor"]), int(parts["patch"])
    pre, pre_n = parts["pre"], int(parts["pre_n"] or 0)
    if distance == 0 and not dirty:
        python = f"{major}.{minor}.{patch}" + (f"{_PEP440_PRE[pre]}{pre_n}" if pre else "")
        return Version(python, tag, revision, created)
    if pre:
        base_py = f"{major}.{minor}.{patch}{_PEP440_PRE[pre]}{pre_n + 1}"
        base_tag = f"v{major}.{minor}.{patch}-{pre}.{pre_n + 1}"
    else:
        base_py = f"{major}.{minor}.{patch + 1}"
        base_tag = f"v{base_py}"
    local = f"g{short}" + (".dirty" if dirty else "")
    image_tag = f"{base_tag}-dev{distance}.g{short}" + ("-dirty" if dirty else "")
    return Version(f"{base_py}.dev{distance}+{local}", image_tag, revision, created)


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise VersionError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def from_git(repo: Path) -> Version:
    """The version of the checkout at `repo`."""
    revision = _git(repo, "rev-parse", "HEAD")
    try:
        describe = _git(repo, "describe", "--tags", "--long", "--dirty", "--match", "v[0-9]*")
    except VersionError:
        describe = _git(repo, "describe", "--always", "--dirty")
        describe = "-dirty" if describe.endswith("-dirty") else ""
    commits = int(_git(repo, "rev-list", "--count", "HEAD"))
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    created = int(epoch) if epoch else int(_git(repo, "log", "-1", "--format=%ct"))
    return from_describe(describe, revision, created, commits)
