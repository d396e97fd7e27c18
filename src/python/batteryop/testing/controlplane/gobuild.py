"""Build (once) and find the pinned control-plane binaries: kube-apiserver and etcd.

The versions are pinned by the Go module in `3rdparty/go/controlplane` (go.mod
and go.sum, so every dependency is checked against the checksum database's
answers recorded there). The binaries are built with the machine's Go through
the Go module proxy and cached under `$BATTERYOP_CACHE/controlplane/<key>/bin`,
where key is the sha256 of go.mod and go.sum: a change to either builds anew,
and the same pins are never built twice. Concurrent test processes serialise on
a file lock, so exactly one of them builds and the others wait for it.

`BATTERYOP_CONTROLPLANE_BIN` names a directory holding ready binaries
(`kube-apiserver`, `etcd`) and skips all of this.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from batteryop.testing.gomodules import GoModuleError, find_pins, go_binary

log = logging.getLogger(__name__)

MODULE_DIR = Path("3rdparty/go/controlplane")
# Package path of each binary inside the pinned module graph.
PACKAGES = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "etcd": "go.etcd.io/etcd/server/v3",
}


class ControlPlaneBuildError(RuntimeError):
    """The pinned kube-apiserver or etcd could not be built."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


def cache_root() -> Path:
    root = os.environ.get("BATTERYOP_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "batteryop"


def find_module_dir(start: Path | None = None) -> Path:
    """The pinned Go module, looked up from `start` (default: cwd) upwards.

    Under `pants test` the cwd is the sandbox, which holds the module's go.mod
    and go.sum as a `files` dependency; under `pants run` it is the repo root.
    """
    try:
        return find_pins(MODULE_DIR, start)
    except GoModuleError as err:
        raise ControlPlaneBuildError(
            f"{err}; run from the repository or set BATTERYOP_CONTROLPLANE_BIN to a directory "
            "holding kube-apiserver and etcd"
        ) from None


def module_key(module_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update(name.encode() + b"\0" + (module_dir / name).read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def ensure_binaries(module_dir: Path | None = None) -> Binaries:
    """Return the binaries, building them first if this pin was never built."""
    prebuilt = os.environ.get("BATTERYOP_CONTROLPLANE_BIN")
    if prebuilt:
        bins = Binaries(Path(prebuilt) / "kube-apiserver", Path(prebuilt) / "etcd")
        for b in (bins.kube_apiserver, bins.etcd):
            if not os.access(b, os.X_OK):
                raise ControlPlaneBuildError(
                    f"BATTERYOP_CONTROLPLANE_BIN: {b} is not an executable"
                )
        return bins
    module_dir = module_dir or find_module_dir()
    out = cache_root() / "controlplane" / module_key(module_dir)
    bins = Binaries(out / "bin" / "kube-apiserver", out / "bin" / "etcd")
    if _complete(out):
        return bins
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same pin
        if not _complete(out):
            _build(module_dir, out)
    return bins


def _complete(out: Path) -> bool:
    return (out / "bin" / ".complete").is_file()


def _build(module_dir: Path, out: Path) -> None:
    try:
        go = go_binary()
    except GoModuleError as err:
        raise ControlPlaneBuildError(f"{err}; it builds kube-apiserver and etcd") from None
    staging = out / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=readonly")
    env["CGO_ENABLED"] = "0"
    started = time.monotonic()
    log.warning(
        "Building the pinned kube-apiserver and etcd with Go (once per pin; a few minutes cold)"
    )
    for name, package in PACKAGES.items():
        cmd = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(staging / name), package]
        proc = subprocess.run(cmd, cwd=module_dir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
            raise ControlPlaneBuildError(
                f"go build {package} failed (exit {proc.returncode}):\n{tail}"
            )
    (staging / ".complete").write_text(f"{time.monotonic() - started:.1f}s\n")
    shutil.rmtree(out / "bin", ignore_errors=True)
    staging.rename(out / "bin")
    log.warning(
        "Built the control plane in %.0f s into %s", time.monotonic() - started, out / "bin"
    )
