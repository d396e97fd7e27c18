"""The real node's programs: what is built from pinned Go modules, and what Debian provides.

Built (once per pin, cached under `$BATTERYOP_CACHE`, see `controlplane.gobuild.ToolSet`):

- kubelet, kubeadm, kube-proxy, kube-scheduler, kube-controller-manager from
  `3rdparty/go/controlplane`,
  the module set the test API server is built from, with their real version strings;
- containerd (the Host Image's pin, `src/images/host/versions.env`), its runc shim and ctr, and
  CoreDNS, from `3rdparty/go/node`;
- the sandbox ("pause") process from `src/images/pause`, our own twenty lines;
- cert-manager's controllers (`3rdparty/go/certmanager`) and Flux's source-controller and
  kustomize-controller (`3rdparty/go/fluxcontrollers`), which `kubenode.addons` runs as Pods;
- Prometheus (`3rdparty/go/prometheus`), with Kubernetes service discovery and no other, which
  the cluster suite's alert drill runs on the node.

`python -m batteryop.testing.kubenode.binaries` builds every one of them (and the control
plane, the guest image, Flux's OCI command, Helm, Prometheus, and the Flux CLI when the release
tests are told to build it; `prebuilds`) ahead of the tests:
`.ci/run` starts it in the background on a cold machine, so the builds overlap lint and the
unit tests instead of running inside the tests that need them, one after the other. A test
wanting one of them meanwhile waits on its lock.

From Debian (`.ci/run` installs them): runc, the CNI plugins (bridge, host-local, loopback,
portmap), docker-registry, buildah and skopeo, iproute2, nftables and util-linux (unshare,
nsenter).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.release.gomodules import GoModuleError
from batteryop.release.guest_agent import GuestAgentError
from batteryop.testing import fluxcli, fluxoci, guest_image, helmcli
from batteryop.testing.controlplane.gobuild import (
    CONTROL_PLANE,
    NODE,
    ControlPlaneBuildError,
    ToolSet,
    stamp,
)
from batteryop.testing.guest_image import BootError

RUNTIME: Final = ToolSet(
    "kubenode-runtime",
    Path("3rdparty/go/node"),
    {
        "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
        "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
        "coredns": "github.com/coredns/coredns",
    },
    ldflags=(
        stamp(
            "github.com/containerd/containerd/v2/version.Version",
            "github.com/containerd/containerd/v2",
        ),
        stamp("github.com/coredns/coredns/coremain.GitCommit", "github.com/coredns/coredns"),
    ),
    # The snapshotters the node does not use need C libraries or kernel parts this machine lacks.
    tags=("no_btrfs", "no_devmapper"),
)
PAUSE: Final = ToolSet(
    "kubenode-pause", Path("src/images/pause"), {"pause": "."}, sources=("go.mod", "main.go")
)
CERT_MANAGER: Final = ToolSet(
    "kubenode-cert-manager",
    Path(
        "3rdparty/go/certmanager"
    ),  # = testing.certmanager.PINS (which needs the kubernetes client)
    {"cert-manager-controller": "."},
    sources=("go.mod", "go.sum", "main.go"),
)
FLUX_CONTROLLERS: Final = ("source-controller", "kustomize-controller")
FLUX: Final = ToolSet(
    "kubenode-flux",
    Path("3rdparty/go/fluxcontrollers"),
    {c: f"github.com/fluxcd/{c}" for c in FLUX_CONTROLLERS},
)
PROMETHEUS: Final = ToolSet(
    "prometheus",
    Path("3rdparty/go/prometheus"),
    {"prometheus": "github.com/prometheus/prometheus/cmd/prometheus"},
    # The module's version (v0.316.0 is Prometheus 3.16.0), where a release build has its own.
    ldflags=(
        stamp("github.com/prometheus/common/version.Version", "github.com/prometheus/prometheus"),
    ),
    # Kubernetes service discovery alone: the other mechanisms' clients (cloud SDKs) are most
    # of the build and nothing here uses them.
    tags=("remove_all_sd", "enable_kubernetes_sd"),
)
EVERY_SET: Final = (CONTROL_PLANE, NODE, RUNTIME, PAUSE, CERT_MANAGER, FLUX)
"""The node's sets, in the order the tests first need them."""
CNI_DIR: Final = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins."""
DEBIAN_TOOLS: Final = {
    "runc": "runc",
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
    "buildah": "buildah",
    "ip": "iproute2",
    "nft": "nftables",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
}
"""Program -> the Debian package that has it."""


class MissingTool(RuntimeError):
    """A program the node needs is not installed; the message names the Debian package."""


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kubeadm: Path
    kube_proxy: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    containerd: Path
    ctr: Path
    coredns: Path
    pause: Path
    bin_dir: Path
    """containerd's folder: containerd finds its shim on PATH, so this goes first on it."""


def missing_tools() -> list[str]:
    """`program (package)` for each Debian program that is not installed."""
    missing = [f"{p} ({pkg})" for p, pkg in DEBIAN_TOOLS.items() if shutil.which(p) is None]
    if not (CNI_DIR / "bridge").is_file():
        missing.append(f"{CNI_DIR}/bridge (containernetworking-plugins)")
    return missing


def ensure() -> NodeBinaries:
    """Every program of the node, built first where this pin was never built."""
    missing = missing_tools()
    if missing:
        raise MissingTool(f"the real node needs: {', '.join(missing)}")
    kube = NODE.ensure()
    runtime = RUNTIME.ensure()
    pause = PAUSE.ensure()
    return NodeBinaries(
        kubelet=kube["kubelet"],
        kubeadm=kube["kubeadm"],
        kube_proxy=kube["kube-proxy"],
        kube_scheduler=kube["kube-scheduler"],
        kube_controller_manager=kube["kube-controller-manager"],
        containerd=runtime["containerd"],
        ctr=runtime["ctr"],
        coredns=runtime["coredns"],
        pause=pause["pause"],
        bin_dir=runtime["containerd"].parent,
    )


def prebuilds() -> list[tuple[str, Callable[[], object]]]:
    """What `main` builds, by name, in the order the tests first need them: the control plane
    (most integration tests), the guest image (the QEMU backend's tests, early among the unit
    tests), the node's sets, then the Flux CLI (if asked for), Flux's OCI library's command
    (the release and Flux tests), Helm (the chart's and Helm's tests) and Prometheus (the
    cluster suite's alert drill, among the last tests)."""
    first, *rest = EVERY_SET
    return [
        (first.cache_name, first.ensure),
        ("guest-image", guest_image.ensure_image),
        *((toolset.cache_name, toolset.ensure) for toolset in rest),
        # Only when a test will run it: the release tests skip `flux pull artifact` unless
        # $BATTERYOP_FLUX_CLI says `build` (its cold build is ~5 minutes of both cores).
        *([("flux-cli", fluxcli.flux_binary)] if os.environ.get(fluxcli.CHOICE) == "build" else []),
        ("fluxoci", fluxoci.fluxoci_binary),
        ("helm", helmcli.helm_binary),
        (PROMETHEUS.cache_name, PROMETHEUS.ensure),
    ]


def main() -> int:
    """Build everything not yet built for its pins (`prebuilds`); one line each."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    status = 0
    for name, build in prebuilds():
        started = time.monotonic()
        try:
            build()
        except (ControlPlaneBuildError, GoModuleError, BootError, GuestAgentError) as err:
            print(f"{name}: failed: {err}", file=sys.stderr, flush=True)
            status = 1
            continue
        print(f"{name}: ready in {time.monotonic() - started:.0f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CERT_MANAGER",
    "FLUX",
    "PROMETHEUS",
    "ControlPlaneBuildError",
    "MissingTool",
    "NodeBinaries",
    "ensure",
    "missing_tools",
]
