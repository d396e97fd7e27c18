"""Flux's own OCI library for the release tests: a tiny command built once from the pin, to
read the Manifests artifact back with Flux's code (DP-031, DP-033, DP-034).

`3rdparty/go/fluxoci` holds `main.go`, a few lines around `github.com/fluxcd/pkg/oci` (the
library `flux pull artifact` calls: `ParseArtifactURL`, `NewClient`, `Pull`), and the go.mod and
go.sum that pin it. `fluxoci_binary()` builds it the first time into
`$BATTERYOP_CACHE/fluxoci/<hash>/fluxoci`, `<hash>` being the sha256 of those three files, so a
new pin or a changed main.go builds anew. `go build -mod=readonly` fetches the modules through
the Go module proxy and refuses any whose content differs from go.sum. A cold build (empty Go
caches) took under two minutes on the shared 2-core machine, a warm one seconds.

`pull(binary, ref, out)` runs it: `fluxoci oci://<ref> <out>` over plain HTTP (the tests'
loopback registry has no TLS). It prints the artifact's metadata as the library read it (JSON)
and exits 0, or prints the library's error and exits 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batteryop.release import gomodules

MODULE = "github.com/fluxcd/pkg/oci"
PINS = Path("3rdparty/go/fluxoci")
SOURCES = ("go.mod", "go.sum", "main.go")


def cache_dir() -> Path:
    base = os.environ.get("BATTERYOP_CACHE") or str(Path.home() / ".cache" / "batteryop")
    return Path(base) / "fluxoci"


def pins_hash(pins: Path) -> str:
    """sha256 over the pin's files, names included, in a fixed order."""
    digest = hashlib.sha256()
    for name in SOURCES:
        data = (pins / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def fluxoci_binary() -> Path:
    pins = gomodules.find_pins(PINS)

    def make(tmp: Path) -> Path:
        gomodules.download(pins, [MODULE])  # a clear error where the proxy or go.sum refuses it
        tree = tmp / "src"
        tree.mkdir()
        for name in SOURCES:
            shutil.copyfile(pins / name, tree / name)
        gomodules.build(tree, ".", tmp / "fluxoci", flags=["-mod=readonly"], timeout=900)
        return tmp / "fluxoci"

    return gomodules.build_once(cache_dir() / pins_hash(pins)[:16] / "fluxoci", make)


@dataclass(frozen=True)
class Pulled:
    returncode: int
    metadata: dict[str, Any] | None
    """What Flux's library read from the manifest (source, revision, digest, annotations)."""
    error: str


def pull(binary: Path, ref: str, out: Path) -> Pulled:
    """Pull `oci://<ref>` into the existing folder `out` with Flux's library."""
    proc = subprocess.run(
        [str(binary), f"oci://{ref}", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    metadata = json.loads(proc.stdout) if proc.returncode == 0 else None
    return Pulled(proc.returncode, metadata, proc.stderr.strip())
