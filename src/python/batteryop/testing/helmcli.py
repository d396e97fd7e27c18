"""Helm's CLI for the chart's tests, built once from the pinned Go module.

`3rdparty/go/helm/go.mod` pins `helm.sh/helm/v4` (and go.sum every module it needs);
`helm_binary()` builds `helm.sh/helm/v4/cmd/helm` the first time into
`$BATTERYOP_CACHE/helm/<key>/bin/helm` (`controlplane.gobuild.ToolSet`: `<key>` is the sha256
of go.mod and go.sum, the build shares Go's caches with the other pinned tools, and concurrent
callers wait on one build), with Helm's version string set as its Makefile sets it.
`BATTERYOP_HELM` names a ready binary instead. Measured on the shared 2-core machine
(2026-12-06, load average about 5): with empty module and build caches, 6 min 11 s wall (1,182
packages, 542 MB of modules, a 67 MB binary); with Go's build cache warm from the other pins,
2 min 21 s; later runs reuse the binary. `.ci/run`'s prebuild builds it in the background.

`run(binary, *args, kubeconfig=...)` runs it with a private Helm home (config, cache and data
under a temporary folder: no repository list, registry login or kubeconfig of the machine's is
read) and returns the finished process.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

from batteryop.testing.controlplane.gobuild import ToolSet, stamp

MODULE: Final = "helm.sh/helm/v4"
HELM: Final = ToolSet(
    "helm",
    Path("3rdparty/go/helm"),
    {"helm": f"{MODULE}/cmd/helm"},
    ldflags=(stamp(f"{MODULE}/internal/version.version", MODULE),),
)


def helm_binary() -> Path:
    """The pinned Helm, built first if this pin was never built (or `$BATTERYOP_HELM`)."""
    prebuilt = os.environ.get("BATTERYOP_HELM")
    if prebuilt:
        return Path(prebuilt)
    return HELM.ensure()["helm"]


def ready_helm() -> Path:
    """`helm_binary`, with the time it took printed (a test module's fixture calls it)."""
    started = time.monotonic()
    binary = helm_binary()
    print(f"\nhelm ready in {time.monotonic() - started:.0f} s: {binary}")
    return binary


def run(
    binary: Path, *args: str, kubeconfig: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`helm <args>` with a private Helm home (and `kubeconfig`'s cluster); never raises on a
    non-zero exit."""
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {
            "KUBECONFIG": str(kubeconfig or Path(home) / "no-kubeconfig"),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_DATA_HOME": f"{home}/data",
        }
        return subprocess.run(
            [str(binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
