"""flintlock's guest agent, built as a dependency of the guest root filesystem (GI-020, GI-031).

The Go module proxy refuses `github.com/liquidmetal-dev/guest-agent`, so its upstream source
comes as a tarball from the shared third-party folder (`$BATTERYOP_THIRD_PARTY`, which CI
has; see its README). The tarball is checked against the sha256 pinned in
`src/images/guest/rootfs/versions.env`, unpacked, and built with the machine's Go as upstream's
release builds it (`CGO_ENABLED=0`, `-s -w`, the version stamped) for amd64 and arm64; its one
module dependency comes from the Go module proxy and is checked against the tarball's go.sum
(`-mod=readonly`). The binaries are cached under `$BATTERYOP_CACHE/guest-agent/<sha256>/`, so
one tarball is built once. Nothing of the agent's code is copied into this repository.

    agent = ensure_agent("amd64")   # .../<sha256>/amd64/{guest-agent,guest-agent.service}
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.testing.controlplane.gobuild import cache_root
from batteryop.testing.gomodules import GoModuleError, build

log = logging.getLogger(__name__)

VERSIONS: Final = Path("src/images/guest/rootfs/versions.env")
ARCHITECTURES: Final = ("amd64", "arm64")
PACKAGE: Final = "./cmd/guest-agent"
UNIT: Final = "init/guest-agent.service"
VERSION_VARIABLE: Final = "github.com/liquidmetal-dev/guest-agent/internal/agent.Version"


class GuestAgentError(RuntimeError):
    """The guest agent's source is missing or altered, or it did not build."""


@dataclass(frozen=True)
class Source:
    """The pinned tarball: its file name, sha256 and the version the binary reports."""

    filename: str
    sha256: str
    version: str


@dataclass(frozen=True)
class Agent:
    """One architecture's static binary and upstream's systemd unit, in one folder (what
    `build-rootfs.sh --guest-agent` takes)."""

    arch: str
    binary: Path
    unit: Path
    version: str

    @property
    def folder(self) -> Path:
        return self.binary.parent


def read_versions(path: Path = VERSIONS) -> dict[str, str]:
    """The KEY=value lines of a versions.env (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            values[key.strip()] = value.strip()
    return values


def pinned_source(path: Path = VERSIONS) -> Source:
    values = read_versions(path)
    try:
        return Source(
            values["GUEST_AGENT_SOURCE"],
            values["GUEST_AGENT_SOURCE_SHA256"],
            values["GUEST_AGENT_SOURCE_VERSION"],
        )
    except KeyError as err:
        raise GuestAgentError(f"{path} pins no {err.args[0]}") from None


def third_party_dir() -> Path:
    """`$BATTERYOP_THIRD_PARTY`, else `../shared/third_party` beside the working directory."""
    named = os.environ.get("BATTERYOP_THIRD_PARTY")
    return Path(named) if named else Path.cwd().parent / "shared" / "third_party"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_agent(arch: str, *, source: Source | None = None, folder: Path | None = None) -> Agent:
    """The agent for `arch`, built from the checked tarball once per sha256 (both
    architectures together); concurrent callers wait on a file lock for one build."""
    if arch not in ARCHITECTURES:
        raise GuestAgentError(f"architecture must be one of {ARCHITECTURES}, not {arch!r}")
    source = source or pinned_source()
    out = cache_root() / "guest-agent" / source.sha256
    if not (out / ".complete").is_file():
        out.mkdir(parents=True, exist_ok=True)
        with open(out / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / ".complete").is_file():
                _build(source, folder or third_party_dir(), out)
    folder = out / arch
    return Agent(arch, folder / "guest-agent", folder / "guest-agent.service", source.version)


def _build(source: Source, folder: Path, out: Path) -> None:
    tarball = folder / source.filename
    if not tarball.is_file():
        raise GuestAgentError(
            f"{tarball} not found: set BATTERYOP_THIRD_PARTY to the folder holding it"
        )
    found = sha256_of(tarball)
    if found != source.sha256:
        raise GuestAgentError(f"{tarball}: sha256 {found}, pinned {source.sha256}")
    started = time.monotonic()
    staging = out / "partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    with tarfile.open(tarball) as archive:
        archive.extractall(staging / "src", filter="data")
    (tree,) = (p for p in (staging / "src").iterdir() if (p / "go.mod").is_file())
    env = {**os.environ, "CGO_ENABLED": "0", "GOOS": "linux", "GOFLAGS": "-mod=readonly"}
    ldflags = f"-ldflags=-s -w -X {VERSION_VARIABLE}={source.version}"
    for arch in ARCHITECTURES:
        (staging / arch).mkdir()
        try:
            build(
                tree,
                PACKAGE,
                staging / arch / "guest-agent",
                flags=("-trimpath", ldflags),
                env={**env, "GOARCH": arch},
                timeout=600,
            )
        except GoModuleError as err:
            raise GuestAgentError(str(err)) from err
        shutil.copy(tree / UNIT, staging / arch / "guest-agent.service")
    for arch in ARCHITECTURES:
        shutil.rmtree(out / arch, ignore_errors=True)
        (staging / arch).rename(out / arch)
    shutil.rmtree(staging)
    (out / ".complete").write_text(f"{time.monotonic() - started:.1f}s\n")
    seconds = time.monotonic() - started
    log.warning("Built the guest agent %s (amd64, arm64) in %.0f s", source.version, seconds)
