"""Multi-architecture OCI images from root filesystems, with buildah and no emulation.

Nothing runs inside an image while it is built (no RUN step), so an arm64 image is made on an
amd64 machine exactly like an amd64 one: per architecture, `buildah from --arch <arch>
scratch`, one `buildah add` per layer directory (as a tar archive, owners and modes kept), `buildah config` (architecture, user,
entrypoint, labels), `buildah commit --timestamp <created>`; then one manifest list of all
architectures, pushed with `--all` to an `oci:` layout directory. buildah keeps its storage
(vfs driver) in a private folder, removed afterwards: the host's container storage is never
touched. Equal inputs give equal digests: file times and the image's created time are the
given timestamp, and no build path enters an image.

The Host/guest image builders reuse `Buildah` and `build_index` for their own root
filesystems.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

GOARCH: Final = {"amd64": "amd64", "arm64": "arm64"}
"""Debian architecture → OCI platform architecture (they agree for the two we build)."""
MISSING_BUILDAH: Final = (
    "buildah not found: images are skipped (install Debian's buildah: apt-get install buildah)"
)


class OciError(RuntimeError):
    """buildah failed, or an OCI layout is not what we expect."""


def have_buildah() -> bool:
    return shutil.which("buildah") is not None


@dataclass(frozen=True)
class ImageConfig:
    """The per-image settings (the same for every architecture)."""

    entrypoint: Sequence[str]
    user: str = "65532:65532"
    workdir: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Platform:
    """One architecture's image: its layers (directories, bottom first) in order."""

    architecture: str
    layers: Sequence[Path]


class Buildah:
    """buildah with its own storage under `state` (vfs driver, chroot isolation)."""

    def __init__(self, state: Path) -> None:
        if not have_buildah():
            raise OciError(MISSING_BUILDAH)
        self.state = state
        (state / "root").mkdir(parents=True, exist_ok=True)
        (state / "runroot").mkdir(parents=True, exist_ok=True)
        self.base = [
            "buildah",
            "--root", str(state / "root"),
            "--runroot", str(state / "runroot"),
            "--storage-driver", "vfs",
        ]  # fmt: skip

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(
            [*self.base, *args],
            capture_output=True,
            text=True,
            check=False,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "BUILDAH_ISOLATION": "chroot"},
        )
        if proc.returncode != 0:
            tail = " ".join(proc.stderr.strip().splitlines()[-3:])
            raise OciError(f"buildah {' '.join(args[:2])} failed: {tail}")
        return proc.stdout.strip()

    def remove_storage(self) -> None:
        # vfs layers hold root-owned copies of whole root filesystems.
        subprocess.run([*self.base, "rm", "--all"], capture_output=True, check=False)
        shutil.rmtree(self.state, ignore_errors=True)


def build_platform_image(
    buildah: Buildah, platform: Platform, config: ImageConfig, created: int, name: str
) -> str:
    """Commit one architecture's image (one layer per directory); returns its image ID."""
    arch = GOARCH[platform.architecture]
    container = buildah("from", "--arch", arch, "--os", "linux", "--name", name, "scratch")
    try:
        for i, layer in enumerate(platform.layers):
            if i > 0:
                # Each layer is a commit, and the next container starts from it: the lower
                # layers of images sharing them keep equal digests.
                lower = f"{name}-layer{i}"
                buildah(
                    "commit",
                    "--timestamp",
                    str(created),
                    "--format",
                    "oci",
                    "--rm",
                    container,
                    lower,
                )
                container = buildah("from", "--arch", arch, "--os", "linux", "--name", name, lower)
            buildah(
                "add", container, str(_layer_tar(layer, buildah.state / f"{name}-{i}.tar")), "/"
            )
        args = ["config", "--arch", arch, "--os", "linux", "--user", config.user]
        args += [
            "--workingdir",
            config.workdir,
            "--entrypoint",
            json.dumps(list(config.entrypoint)),
        ]
        args += ["--cmd", "", "--created-by", "batteryop.release"]
        for key, value in sorted(config.env.items()):
            args += ["--env", f"{key}={value}"]
        for key, value in sorted(config.labels.items()):
            args += ["--label", f"{key}={value}"]
        buildah(*args, container)
        image = buildah(
            "commit", "--timestamp", str(created), "--format", "oci", "--rm", container, name
        )
        return image.splitlines()[-1]
    except OciError:
        buildah("rm", container)
        raise


def _layer_tar(layer: Path, out: Path) -> Path:
    """`layer` as a tar archive keeping each file's numeric owner, group and mode (set-id bits
    too), for `buildah add` to unpack: `buildah copy` of a folder makes every file root's, which
    a root filesystem with group-owned files (a guest's `unix_chkpwd`, root:shadow 2755) cannot
    take. Names are sorted; times do not matter (the commit's `--timestamp` sets them)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["tar", "--numeric-owner", "--sort=name", "--xattrs", "-C", str(layer), "-cf", str(out), "."],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise OciError(f"tar of {layer} failed: {done.stderr.strip()[-500:]}")
    return out


# DP-103: one index of every architecture, built with no RUN step (no emulation).
# DP-104: file times and the created time are `created`; no build path enters the image.
def build_index(
    platforms: Sequence[Platform],
    config: ImageConfig,
    *,
    created: int,
    out: Path,
    tag: str,
    state: Path,
) -> str:
    """Build every platform's image and write one OCI index to the layout `out` under `tag`.

    Returns the index's digest (`sha256:...`).
    """
    buildah = Buildah(state)
    try:
        images = [
            build_platform_image(buildah, p, config, created, f"localhost/img-{p.architecture}")
            for p in platforms
        ]
        buildah("manifest", "create", "localhost/index")
        for image in images:
            buildah("manifest", "add", "localhost/index", image)
        if out.exists():
            shutil.rmtree(out)
        buildah(
            "manifest", "push", "--all", "--format", "oci", "localhost/index", f"oci:{out}:{tag}"
        )
    finally:
        buildah.remove_storage()
    return index_digest(out, tag)


def read_index(layout: Path) -> dict[str, object]:
    try:
        data = json.loads((layout / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise OciError(f"{layout} is not an OCI layout: {err}") from None
    if not isinstance(data, dict):
        raise OciError(f"{layout}/index.json is not an object")
    return data


def index_digest(layout: Path, tag: str | None = None) -> str:
    """The digest of the manifest (here, the image index) the layout names under `tag`."""
    entries = read_index(layout).get("manifests", [])
    assert isinstance(entries, list)
    for entry in entries:
        ref = entry.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if tag is None or ref == tag:
            return str(entry["digest"])
    raise OciError(f"{layout} holds no manifest tagged {tag!r}")


def blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    return (layout / "blobs" / algorithm / hexdigest).read_bytes()


def platform_manifests(layout: Path, tag: str | None = None) -> dict[str, dict[str, Any]]:
    """Per architecture, the image manifest the layout's index points at."""
    index = json.loads(blob(layout, index_digest(layout, tag)))
    out = {}
    for entry in index["manifests"]:
        arch = entry["platform"]["architecture"]
        out[arch] = json.loads(blob(layout, entry["digest"]))
    return out


def compressed_size(manifest: Mapping[str, object]) -> int:
    """The bytes a pull of this image transfers: its config and its (compressed) layers."""
    layers = manifest["layers"]
    config = manifest["config"]
    assert isinstance(layers, list) and isinstance(config, dict)
    return int(config["size"]) + sum(int(layer["size"]) for layer in layers)
