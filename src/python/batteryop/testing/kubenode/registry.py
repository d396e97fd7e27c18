"""Images into the cluster's registry (on the first Node): OCI layouts copied by digest, and
images made of one static binary."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from batteryop.release import oci
from batteryop.testing.kubenode.names import REGISTRY

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode


def push(node: KubeNode, layout: Path, tag: str, repository: str) -> str:
    """Copy an OCI layout's `tag` into the cluster's registry as `repository:tag`, digests
    unchanged (skopeo, inside the first Node); returns the reference pushed."""
    ref = f"{REGISTRY}/{repository}:{tag}"
    node.node_run(
        [
            "skopeo",
            "copy",
            "--all",
            "--preserve-digests",
            "--dest-tls-verify=false",
            f"oci:{layout.resolve()}:{tag}",
            f"docker://{ref}",
        ]
    )
    return ref


def push_binary(node: KubeNode, binary: Path, repository: str, tag: str, *, user: str) -> str:
    """An image holding only `binary` (static), as its entry point, pushed to the cluster's
    registry as `repository:tag`; returns the reference pushed."""
    stage = node.state / "images" / repository.replace("/", "_")
    (stage / "layer").mkdir(parents=True)
    shutil.copy2(binary, stage / "layer" / binary.name)
    oci.build_index(
        [oci.Platform("amd64", [stage / "layer"])],
        oci.ImageConfig(entrypoint=[f"/{binary.name}"], user=user),
        created=0,
        out=stage / "layout",
        tag=tag,
        state=stage / "buildah",
    )
    return push(node, stage / "layout", tag, repository)
