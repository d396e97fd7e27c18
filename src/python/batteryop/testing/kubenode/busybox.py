"""A busybox image on the cluster's registry, for Pods that probe the Pod network.

The static busybox is pinned in `busybox.lock.json` beside this module (sha256-checked, cached
with the other pinned packages); its `nc` and `httpd` work inside
containers (its `wget` does not: `../shared/notes/real-node.md`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from batteryop.release import debs
from batteryop.testing.kubenode import registry

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode

PACKAGE: Final = "busybox-static"
LOCK: Final = Path(__file__).with_name("busybox.lock.json")
REPOSITORY: Final = "batteryop/busybox"


def busybox_binary() -> Path:
    """The pinned static busybox, unpacked once into the packages' cache."""
    (deb,) = (d for d in debs.load_lock(LOCK).for_arch("amd64") if d.package == PACKAGE)
    out = debs.cache_dir() / f"{deb.sha256}-unpacked" / "bin" / "busybox"
    if not out.is_file():
        with tempfile.TemporaryDirectory(prefix="batteryop-busybox-", dir=debs.cache_dir()) as tmp:
            debs.unpack(debs.fetch([deb]), Path(tmp) / "root")
            out.parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / "root" / "bin" / "busybox").replace(out)
    return out


def push_busybox(node: KubeNode) -> str:
    """The busybox image (`/busybox` its entry point, run as nobody) in the cluster's
    registry; returns its reference."""
    return registry.push_binary(node, busybox_binary(), REPOSITORY, "pinned", user="65534:65534")
