"""flintlock's guest agent, built as a dependency of the guest root filesystem (GI-020, GI-031).

The Go module proxy refuses `github.com/liquidmetal-dev/guest-agent`, so its upstream source
comes as a tarball from the shared third-party folder (`$BATTERYOP_THIRD_PARTY`, which CI
has; see its README). The tarball is checked against the sha256 pinned in
`src/images/guest/rootfs/versions.env`, unpacked, and built with the machine's Go as upstream's
release builds it (`CGO_ENABLED=0`, `-s -w`, the version stamped) for amd64 and arm64; its one
module dependency comes from the Go module proxy and is checked against the tarball's go.sum
(`-mod=readonly`). The binaries are cached under `$BATTERYOP_CACHE/guest-agent/<sha256>/`, so
one tarball is built once (`third_party.built_once`). Nothing of the agent's code is copied
into this repository.

    agent = ensure_agent("amd64")   # .../<sha256>/amd64/{guest-agent,guest-agent.service}
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.release.gomodules import GoModuleError, build
from batteryop.release.third_party import Tarball, built_once

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


def ensure_agent(arch: str, *, source: Source | None = None, folder: Path | None = None) -> Agent:
    """The agent for `arch`, built from the checked tarball once per sha256 (both
    architectures together); concurrent callers wait on a file lock for one build."""
    if arch not in ARCHITECTURES:
        raise GuestAgentError(f"architecture must be one of {ARCHITECTURES}, not {arch!r}")
    source = source or pinned_source()

    def build_both(tree: Path, out: Path) -> None:
        started = time.monotonic()
        env = {**os.environ, "CGO_ENABLED": "0", "GOOS": "linux", "GOFLAGS": "-mod=readonly"}
        ldflags = f"-ldflags=-s -w -X {VERSION_VARIABLE}={source.version}"
        for arch in ARCHITECTURES:
            (out / arch).mkdir()
            try:
                build(
                    tree,
                    PACKAGE,
                    out / arch / "guest-agent",
                    flags=("-trimpath", ldflags),
                    env={**env, "GOARCH": arch},
                    timeout=600,
                )
            except GoModuleError as err:
                raise GuestAgentError(str(err)) from err
            shutil.copy(tree / UNIT, out / arch / "guest-agent.service")
        seconds = time.monotonic() - started
        log.warning("Built the guest agent %s (amd64, arm64) in %.0f s", source.version, seconds)

    built = built_once(
        "guest-agent",
        Tarball(source.filename, source.sha256),
        build_both,
        folder=folder,
        error=GuestAgentError,
    )
    return Agent(
        arch, built / arch / "guest-agent", built / arch / "guest-agent.service", source.version
    )
