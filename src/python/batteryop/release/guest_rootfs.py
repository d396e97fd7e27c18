"""The guest root filesystem (GI-010..GI-027): Debian 12 trees made by
`src/images/guest/debian/build-rootfs.sh` with flintlock's guest agent built from its pinned
source (`guest_agent`, GI-026), packed as one multi-architecture OCI image with the release
images' buildah recipe (`oci.build_index`: no RUN step, no emulation, reproducible; GI-030).

Each architecture's tree becomes one layer. flintlockd uses the image as the MicroVM's root
volume, never runs it as a container: the config only records systemd as the entrypoint, root
as the user, and the release labels. The release notes say Ubuntu 24.04 (GI-010); Ubuntu's
archive is not reachable where this is built, so the image is Debian 12 with the same packages,
files and checks, and its description label says so.

The Debian packages are what apt resolves for the architecture when the tree is built (the
index is refreshed daily), so two builds on the same day give the same digest.

    python -m batteryop.release.guest_rootfs --tree amd64=DIR --tree arm64=DIR \\
        --out LAYOUT --tag TAG [--created EPOCH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from batteryop.release import guest_agent, images, oci
from batteryop.release.version import Version

NAME: Final = "guest-rootfs"
INIT: Final = "/sbin/init"
BUILD_ROOTFS: Final = Path("src/images/guest/debian/build-rootfs.sh")
DESCRIPTION: Final = (
    "Debian 12 guest root filesystem with flintlock's guest agent (GI-010..GI-027; Debian where "
    "the release notes say Ubuntu 24.04: the same packages, files and checks)"
)
TREE_TIMEOUT_SECONDS: Final = 900


class RootfsError(RuntimeError):
    """A tree could not be built."""


def build_tree(out: Path, arch: str) -> Path:
    """The Debian root filesystem for `arch`, with the guest agent (GI-026), in `out`."""
    agent = guest_agent.ensure_agent(arch)
    argv = ["bash", str(BUILD_ROOTFS), "--arch", arch, "--out", str(out),
            "--guest-agent", str(agent.folder)]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=TREE_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        raise RootfsError(
            f"build-rootfs.sh --arch {arch} took over {TREE_TIMEOUT_SECONDS} s"
        ) from None
    if done.returncode != 0:
        raise RootfsError(f"build-rootfs.sh --arch {arch} failed: {done.stderr[-2000:]}")
    return out


def config(version: Version) -> oci.ImageConfig:
    return oci.ImageConfig(
        entrypoint=[INIT],
        user="0:0",
        labels={
            **images.labels(NAME, version),
            "org.opencontainers.image.description": DESCRIPTION,
        },
    )


def build(trees: Mapping[str, Path], out: Path, version: Version) -> str:
    """One image per architecture of `trees` (one layer each), one index in the OCI layout
    `out` under the version's tag; returns the index digest."""
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
            config(version),
            created=version.created,
            out=out,
            tag=version.image_tag,
            state=Path(tmp) / "buildah",
        )


def build_image(architectures: Sequence[str], out: Path, version: Version) -> str:
    """The trees of `architectures` built, then packed (the release's `guest-image`)."""
    with tempfile.TemporaryDirectory(prefix="guest-rootfs-trees-") as tmp:
        trees = {arch: build_tree(Path(tmp) / arch, arch) for arch in architectures}
        return build(trees, out, version)


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
        version = Version(python="", image_tag=args.tag, revision="", created=args.created)
        digest = build(trees, args.out, version)
    except (ValueError, oci.OciError, OSError) as err:
        print(f"guest_rootfs: {err}", file=sys.stderr)
        return 1
    print(f"{args.out}:{args.tag} {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
