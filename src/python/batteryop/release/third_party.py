"""Sources no registry serves, as tarballs in the shared third-party folder, built once.

The folder is `$BATTERYOP_THIRD_PARTY` (CI has it; see its README). A tarball is checked
against the sha256 its caller pins, unpacked, and built by the caller's function into
`$BATTERYOP_CACHE/<name>/<sha256>/`, so one tarball is built once; concurrent callers wait on
a file lock for that one build. Nothing of these sources is copied into this repository.
Used by the guest agent (`release.guest_agent`), the guest kernel's configuration
(`release.guest_kernel`) and the peer benchmark's agent-sandbox controller (`tests/bench/peers`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from batteryop.release.debs import cache_root, sha256_of


class ThirdPartyError(RuntimeError):
    """A third-party tarball is missing or altered, or what is built from it failed."""


@dataclass(frozen=True)
class Tarball:
    """A pinned tarball of the third-party folder: its file name and sha256."""

    filename: str
    sha256: str


def third_party_dir() -> Path:
    """`$BATTERYOP_THIRD_PARTY`, else `../shared/third_party` beside the working directory."""
    named = os.environ.get("BATTERYOP_THIRD_PARTY")
    return Path(named) if named else Path.cwd().parent / "shared" / "third_party"


def built_once(
    name: str,
    tarball: Tarball,
    build: Callable[[Path, Path], None],
    *,
    folder: Path | None = None,
    error: type[Exception] = ThirdPartyError,
) -> Path:
    """`$BATTERYOP_CACHE/<name>/<sha256>`, filled the first time by `build(tree, out)`: `tree`
    is the unpacked source (the folder of the tarball holding go.mod), `out` an empty folder
    whose contents become the result's. The tarball is read from `folder` (default:
    `third_party_dir()`) and checked first; `error` is raised (with the cause) when it is
    missing or altered, or `build` raises."""
    out = cache_root() / name / tarball.sha256
    if not (out / ".complete").is_file():
        out.mkdir(parents=True, exist_ok=True)
        with open(out / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / ".complete").is_file():
                try:
                    _build(tarball, folder or third_party_dir(), out, build)
                except ThirdPartyError as err:
                    raise error(str(err)) from err
    return out


def _build(tarball: Tarball, folder: Path, out: Path, build: Callable[[Path, Path], None]) -> None:
    path = folder / tarball.filename
    if not path.is_file():
        raise ThirdPartyError(
            f"{path} not found: set BATTERYOP_THIRD_PARTY to the folder holding it"
        )
    found = sha256_of(path)
    if found != tarball.sha256:
        raise ThirdPartyError(f"{path}: sha256 {found}, pinned {tarball.sha256}")
    started = time.monotonic()
    staging = out / "partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    with tarfile.open(path) as archive:
        archive.extractall(staging / "src", filter="data")
    (tree,) = (p for p in (staging / "src").iterdir() if (p / "go.mod").is_file())
    (staging / "out").mkdir()
    build(tree, staging / "out")
    for made in (staging / "out").iterdir():
        target = out / made.name
        if target.is_dir():
            shutil.rmtree(target)
        made.rename(target)
    shutil.rmtree(staging)
    (out / ".complete").write_text(f"{time.monotonic() - started:.1f}s\n")
