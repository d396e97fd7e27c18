"""The Debian guest root filesystem as one multi-architecture OCI image (GI-030), with the
release images' buildah recipe (`oci.build_index`: no RUN step, no emulation, reproducible).

Each architecture's tree (made by `src/images/guest/debian/build-rootfs.sh`) becomes one layer.
flintlockd uses the image as the MicroVM's root volume, never runs it as a container: the
config only records systemd as the entrypoint, root as the user, and the usual labels.

    python -m batteryop.release.guest_rootfs --tree amd64=DIR --tree arm64=DIR \\
        --out LAYOUT --tag TAG [--created EPOCH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from batteryop.release import oci
from batteryop.release.images import created_rfc3339

NAME: Final = "guest-rootfs"
INIT: Final = "/sbin/init"


def config(tag: str, created: int) -> oci.ImageConfig:
    return oci.ImageConfig(
        entrypoint=[INIT],
        user="0:0",
        labels={
            "org.opencontainers.image.title": NAME,
            "org.opencontainers.image.version": tag,
            "org.opencontainers.image.description": "Debian 12 guest root filesystem (GI-010..025)",
            "org.opencontainers.image.created": created_rfc3339(created),
        },
    )


def build(trees: Mapping[str, Path], out: Path, *, tag: str, created: int) -> str:
    """One image per architecture of `trees` (one layer each), one index in the OCI layout
    `out` under `tag`; returns the index digest."""
    unknown = sorted(set(trees) - set(oci.GOARCH))
    if unknown:
        raise ValueError(f"--tree: architecture must be one of {sorted(oci.GOARCH)}: {unknown}")
    for arch, tree in trees.items():
        if not (tree / "etc/machine-id").is_file():
            raise ValueError(
                f"--tree {arch}={tree}: not a guest root filesystem (no etc/machine-id)"
            )
    platforms = [oci.Platform(arch, [tree]) for arch, tree in sorted(trees.items())]
    with tempfile.TemporaryDirectory(prefix="image-guest-rootfs-") as tmp:
        return oci.build_index(
            platforms,
            config(tag, created),
            created=created,
            out=out,
            tag=tag,
            state=Path(tmp) / "buildah",
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batteryop.release.guest_rootfs",
        description="Pack Debian guest root filesystem trees as one OCI image index.",
    )
    parser.add_argument("--tree", action="append", required=True, metavar="ARCH=DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--created", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        trees = {}
        for value in args.tree:
            arch, sep, path = value.partition("=")
            if not sep or not path:
                raise ValueError(f"--tree must be ARCH=DIR, got {value!r}")
            trees[arch] = Path(path)
        digest = build(trees, args.out, tag=args.tag, created=args.created)
    except (ValueError, oci.OciError, OSError) as err:
        print(f"guest_rootfs: {err}", file=sys.stderr)
        return 1
    print(f"{args.out}:{args.tag} {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
