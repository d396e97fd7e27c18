"""The real node's programs: what is built from pinned Go modules, and what Debian provides.

Built (once per pin, cached under `$BATTERYOP_CACHE`, see `controlplane.gobuild.ToolSet`):

- kubelet, kube-proxy, kube-scheduler, kube-controller-manager from `3rdparty/go/controlplane`,
  the module set the test API server is built from, with their real version strings;
- containerd (the Host Image's pin, `src/images/host/versions.env`), its runc shim and ctr, and
  CoreDNS, from `3rdparty/go/node`;
- the sandbox ("pause") process from `src/images/pause`, our own twenty lines.

From Debian (`.ci/run` installs them): runc, the CNI plugins (bridge, host-local, loopback,
portmap), docker-registry, buildah and skopeo, iproute2, nftables and util-linux (unshare,
nsenter).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.testing.controlplane.gobuild import NODE, ControlPlaneBuildError, ToolSet

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
        "-X github.com/containerd/containerd/v2/version.Version="
        "{module:github.com/containerd/containerd/v2}",
        "-X github.com/coredns/coredns/coremain.GitCommit={module:github.com/coredns/coredns}",
    ),
    # The snapshotters the node does not use need C libraries or kernel parts this machine lacks.
    tags=("no_btrfs", "no_devmapper"),
)
PAUSE: Final = ToolSet(
    "kubenode-pause", Path("src/images/pause"), {"pause": "."}, sources=("go.mod", "main.go")
)
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
        kube_proxy=kube["kube-proxy"],
        kube_scheduler=kube["kube-scheduler"],
        kube_controller_manager=kube["kube-controller-manager"],
        containerd=runtime["containerd"],
        ctr=runtime["ctr"],
        coredns=runtime["coredns"],
        pause=pause["pause"],
        bin_dir=runtime["containerd"].parent,
    )


__all__ = ["ControlPlaneBuildError", "MissingTool", "NodeBinaries", "ensure", "missing_tools"]
