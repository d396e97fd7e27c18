"""Go modules pinned in `3rdparty/go/<name>` (go.mod and go.sum): finding the pins, the Go
toolchain, and the checked source of a pinned module.

The control plane's pins are built (`controlplane.gobuild`); others, such as Cluster API's,
are only read: `go mod download` fetches a module zip through the Go module proxy and refuses
it unless it matches go.sum, so the CRDs the tests read are the released ones.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

_GO_FALLBACK = Path("/usr/local/go/bin/go")


class GoModuleError(RuntimeError):
    """A pinned Go module could not be found or fetched."""


def go_binary() -> str:
    """The Go toolchain: `go` on PATH, or the usual /usr/local/go install."""
    go = shutil.which("go") or (str(_GO_FALLBACK) if _GO_FALLBACK.exists() else None)
    if go is None:
        raise GoModuleError("the Go toolchain (go) is not on PATH")
    return go


def find_pins(relative: Path, start: Path | None = None) -> Path:
    """The folder of the pins `relative` (e.g. 3rdparty/go/capi), from `start` (default: the
    working directory) upwards. Under `pants test` that is the sandbox, which holds go.mod and
    go.sum as a `files` dependency; under `pants run`, the repository root."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / relative / "go.mod").is_file():
            return folder / relative
    raise GoModuleError(f"cannot find {relative}/go.mod above {here}")


def download(pins: Path, modules: Iterable[str]) -> dict[str, Path]:
    """Each module's source folder in the module cache, at the version go.mod pins, after Go
    has checked it against go.sum."""
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=readonly")
    proc = subprocess.run(
        [go_binary(), "mod", "download", "-json", *modules],
        cwd=pins,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found: dict[str, Path] = {}
    decoder = json.JSONDecoder()
    text, position = proc.stdout, 0
    while position < len(text.rstrip()):
        info, position = decoder.raw_decode(text, position)
        position = len(text) - len(text[position:].lstrip())
        if info.get("Error"):
            raise GoModuleError(f"{info['Path']}: {info['Error']}")
        found[info["Path"]] = Path(info["Dir"])
    if proc.returncode != 0 or set(found) != set(modules):
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise GoModuleError(f"go mod download failed in {pins}:\n{tail}")
    return found


def build(
    tree: Path,
    package: str,
    output: Path,
    *,
    flags: Iterable[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> None:
    """`go build [flags] -o output package` in `tree`; GoModuleError with the tail of Go's
    output when it fails."""
    proc = subprocess.run(
        [go_binary(), "build", *flags, "-o", str(output), package],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise GoModuleError(f"go build {package} in {tree} failed:\n{tail}")


def build_once(target: Path, make: Callable[[Path], Path]) -> Path:
    """`target`, made the first time by `make(folder)`, which builds into the empty temporary
    `folder` and returns the file it built; that file is moved to `target` whole. Concurrent
    callers (the prebuild of `.ci/run` and a test wanting the same program) wait on a lock
    beside `target` for one build instead of running the same Go build twice."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            with tempfile.TemporaryDirectory(
                prefix=f"{target.name}-build-", dir=target.parent
            ) as tmp:
                os.replace(make(Path(tmp)), target)
    return target
