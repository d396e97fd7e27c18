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
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from batteryop.release.debs import cache_root
from batteryop.release.gomodules import GoModuleError, find_pins, go_binary
from batteryop.testing.progress import Heartbeat, run_reporting

log = logging.getLogger(__name__)

MODULE_DIR = Path("3rdparty/go/controlplane")
# Package path of each binary inside the pinned module graph.
PACKAGES = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "etcd": "go.etcd.io/etcd/server/v3",
}
NODE_PACKAGES = {
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kubeadm": "k8s.io/kubernetes/cmd/kubeadm",
}
"""The node's Kubernetes binaries, from the same pins as the API server (`testing.kubenode`)."""


class ControlPlaneBuildError(RuntimeError):
    """The pinned kube-apiserver or etcd could not be built."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


@dataclass(frozen=True)
class ToolSet:
    """Binaries built from one pinned Go module (`3rdparty/go/<name>`), cached together.

    `ldflags` are added to `-s -w`; `{module:<path>}` in them (`stamp` writes the usual flag)
    is replaced by the version go.mod pins for that module, so a version string is never
    written twice (Kubernetes binaries built outside their own tree report `v0.0.0-master`
    without it)."""

    cache_name: str
    module: Path
    packages: Mapping[str, str]
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    sources: tuple[str, ...] = ("go.mod", "go.sum")
    """The files the cache key is made of (a module of our own adds its source)."""

    def ensure(self, module_dir: Path | None = None) -> dict[str, Path]:
        """Each binary's path, built first if this pin was never built."""
        module_dir = module_dir or _find(self.module)
        out = cache_root() / self.cache_name / module_key(module_dir, self.sources)
        bins = {name: out / "bin" / name for name in self.packages}
        if _complete(out):
            return bins
        out.mkdir(parents=True, exist_ok=True)
        with open(out / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process is building the same pin: say so, wait
                log.warning(
                    "Waiting for another process building the pinned %s (%s)",
                    ", ".join(self.packages),
                    out,
                )
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not _complete(out):
                self._build(module_dir, out)
        return bins

    def _build(self, module_dir: Path, out: Path) -> None:
        try:
            go = go_binary()
        except GoModuleError as err:
            raise ControlPlaneBuildError(f"{err}; it builds {', '.join(self.packages)}") from None
        staging = out / "bin.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        env = dict(os.environ)
        env.setdefault("GOFLAGS", "-mod=readonly")
        env["CGO_ENABLED"] = "0"
        ldflags = " ".join(("-s", "-w", *(_fill(f, module_dir) for f in self.ldflags)))
        tags = [f"-tags={','.join(self.tags)}"] if self.tags else []
        started = time.monotonic()
        log.warning(
            "Building the pinned %s with Go (once per pin; minutes cold)", ", ".join(self.packages)
        )
        names = list(self.packages)
        for i, (name, package) in enumerate(self.packages.items()):
            # `-v` names each package as it is compiled: the count is the progress a person sees.
            cmd = [go, "build", "-v", "-trimpath", *tags, f"-ldflags={ldflags}"]
            cmd += ["-o", str(staging / name), package]
            beat = Heartbeat(
                f"Building {name} ({i + 1} of {len(names)})", left=", ".join(names[i + 1 :])
            )
            done = run_reporting(
                cmd, beat, unit="packages compiled", cwd=module_dir, env=env, is_progress=_package
            )
            if done.returncode != 0:
                raise ControlPlaneBuildError(
                    f"go build {package} failed (exit {done.returncode}):\n{done.tail}"
                )
            beat.beat(f"built, {done.progress_lines} packages compiled", force=True)
        (staging / ".complete").write_text(f"{time.monotonic() - started:.1f}s\n")
        shutil.rmtree(out / "bin", ignore_errors=True)
        staging.rename(out / "bin")
        log.warning("Built %s in %.0f s into %s", self.cache_name, time.monotonic() - started, out)


def _package(line: str) -> bool:
    """Whether a line of `go build -v` names a package it compiled (an import path: one word,
    no colon); errors come as `# package` and `file.go:1:2: ...`."""
    return not line.startswith("#") and ":" not in line and len(line.split()) == 1


def stamp(variable: str, module: str) -> str:
    """The ldflag that sets the Go string `variable` (package path and name) to the version
    go.mod pins for `module`, as that module's own release build stamps it."""
    return f"-X {variable}={{module:{module}}}"


def _fill(flag: str, module_dir: Path) -> str:
    return re.sub(r"\{module:([^}]+)\}", lambda m: pinned_version(module_dir, m[1]), flag)


def pinned_version(module_dir: Path, module: str) -> str:
    """The version go.mod in `module_dir` requires of `module` (e.g. v1.36.3)."""
    for line in (module_dir / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in (module, "require") and module in words:
            return words[words.index(module) + 1]
    raise ControlPlaneBuildError(f"{module_dir}/go.mod does not require {module}")


_KUBERNETES_VERSION = (
    stamp("k8s.io/component-base/version.gitVersion", "k8s.io/kubernetes"),
    "-X k8s.io/component-base/version.gitTreeState=clean",
)
CONTROL_PLANE = ToolSet("controlplane", MODULE_DIR, PACKAGES, _KUBERNETES_VERSION)
NODE = ToolSet("kubenode", MODULE_DIR, NODE_PACKAGES, _KUBERNETES_VERSION)


def _find(relative: Path, start: Path | None = None) -> Path:
    try:
        return find_pins(relative, start)
    except GoModuleError as err:
        raise ControlPlaneBuildError(
            f"{err}; run from the repository or set BATTERYOP_CONTROLPLANE_BIN to a directory "
            "holding kube-apiserver and etcd"
        ) from None


def find_module_dir(start: Path | None = None) -> Path:
    """The pinned Go module, looked up from `start` (default: cwd) upwards.

    Under `pants test` the cwd is the sandbox, which holds the module's go.mod
    and go.sum as a `files` dependency; under `pants run` it is the repo root.
    """
    return _find(MODULE_DIR, start)


def module_key(module_dir: Path, sources: tuple[str, ...] = ("go.mod", "go.sum")) -> str:
    digest = hashlib.sha256()
    for name in sources:
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
    built = CONTROL_PLANE.ensure(module_dir)
    return Binaries(built["kube-apiserver"], built["etcd"])


def _complete(out: Path) -> bool:
    return (out / "bin" / ".complete").is_file()
