"""Flux's own CLI for the release tests, built once from the pinned Go module.

`flux_binary()` returns `$BATTERYOP_CACHE/flux/<version>/flux`, building it the first time:
the module `github.com/fluxcd/flux2/v2` at the version `3rdparty/go/flux/go.mod` pins is
fetched and checked against go.sum (`gomodules.download`), copied to a writable folder, given
one placeholder under `cmd/flux/manifests/` (the install manifests its Makefile generates and
embeds; `flux pull artifact` never reads them), and built with `go build ./cmd/flux`. The
build's dependencies are checked against the module's own go.sum.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from batteryop.release import gomodules

MODULE = "github.com/fluxcd/flux2/v2"
PINS = Path("3rdparty/go/flux")
CHOICE = "BATTERYOP_FLUX_CLI"
"""The release tests' choice of Flux CLI: a binary's path, `build` (from the pin), or unset
(their `flux pull artifact` test is skipped, and nothing builds it)."""


def pinned_version(pins: Path) -> str:
    match = re.search(rf"^require {re.escape(MODULE)} (\S+)$", (pins / "go.mod").read_text(), re.M)
    if match is None:
        raise gomodules.GoModuleError(f"{pins}/go.mod does not require {MODULE}")
    return match[1]


def cache_dir() -> Path:
    base = os.environ.get("BATTERYOP_CACHE") or str(Path.home() / ".cache" / "batteryop")
    return Path(base) / "flux"


def flux_binary() -> Path:
    pins = gomodules.find_pins(PINS)
    version = pinned_version(pins)

    def make(tmp: Path) -> Path:
        source = gomodules.download(pins, [MODULE])[MODULE]
        tree = tmp / "src"
        shutil.copytree(source, tree)
        for path in [tree, *tree.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        manifests = tree / "cmd" / "flux" / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        (manifests / "placeholder.yaml").write_text("# not used by flux pull artifact\n")
        env = dict(os.environ)
        env["GOFLAGS"] = "-mod=mod"
        gomodules.build(tree, "./cmd/flux", tmp / "flux", env=env)
        return tmp / "flux"

    return gomodules.build_once(cache_dir() / version / "flux", make)
