"""A deployable's image: the pinned Debian base plus its PEX, per architecture, in one index.

Two layers per architecture: the base root filesystem (`rootfs.build` from `debs.lock.json`:
CPython 3.11, CA certificates, tzdata), the same for every deployable so registries store it
once, then `/app/<name>.pex`. The image runs as `nonroot` (65532) with the entrypoint
`/usr/bin/python3.11 /app/<name>.pex` (no shell), PEX's cache in `/tmp` (a writable volume in
install.yaml, whose root filesystems are read-only), and the `org.opencontainers.image.*`
labels: source, revision, version, created (from the commit time or `SOURCE_DATE_EPOCH`),
title, licenses.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from batteryop.release import debs, oci, rootfs
from batteryop.release.version import Version

SOURCE_URL: Final = "https://github.com/phoban01/battery-operator"
"""The project's repository: the images' and the manifests artifact's source (DP-034)."""
LICENSE: Final = "Apache-2.0"
PYTHON: Final = "/usr/bin/python3.11"
APP_DIR: Final = "/app"
PEX_ROOT: Final = "/tmp/.pex"


def created_rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels(name: str, version: Version) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.revision": version.revision,
        "org.opencontainers.image.version": version.image_tag,
        "org.opencontainers.image.created": created_rfc3339(version.created),
        "org.opencontainers.image.licenses": LICENSE,
    }


def entrypoint(name: str) -> list[str]:
    """The image `name`'s entrypoint: its PEX under the image's Python (no shell)."""
    return [PYTHON, f"{APP_DIR}/{name}.pex"]


def config(name: str, version: Version) -> oci.ImageConfig:
    # DP-103: non-root, and the entrypoint needs no shell.
    return oci.ImageConfig(
        entrypoint=entrypoint(name),
        user=f"{rootfs.NONROOT}:{rootfs.NONROOT}",
        env={
            "PEX_ROOT": PEX_ROOT,
            "SSL_CERT_FILE": f"/{rootfs.CA_BUNDLE}",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
        },
        labels=labels(name, version),
    )


def stage(
    name: str, pexes: Mapping[str, Path], work: Path, lock: debs.Lock | None = None
) -> list[oci.Platform]:
    """Each architecture's layer folders under `work`: `<arch>/base` and `<arch>/app`."""
    lock = lock or debs.load_lock()
    platforms = []
    for arch, pex in sorted(pexes.items()):
        base = work / arch / "base"
        rootfs.build(lock, arch, base)
        app = work / arch / "app"
        (app / APP_DIR.lstrip("/")).mkdir(parents=True)
        target = app / APP_DIR.lstrip("/") / f"{name}.pex"
        shutil.copyfile(pex, target)
        target.chmod(0o755)
        platforms.append(oci.Platform(arch, [base, app]))
    return platforms


def build(
    name: str,
    pexes: Mapping[str, Path],
    version: Version,
    out: Path,
    *,
    work: Path | None = None,
    lock: debs.Lock | None = None,
) -> str:
    """Build `name`'s image for each architecture of `pexes` into the OCI layout `out`, tagged
    with the version's image tag; returns the index digest."""
    with tempfile.TemporaryDirectory(prefix=f"image-{name}-", dir=work) as tmp:
        platforms = stage(name, pexes, Path(tmp) / "layers", lock)
        return oci.build_index(
            platforms,
            config(name, version),
            created=version.created,
            out=out,
            tag=version.image_tag,
            state=Path(tmp) / "buildah",
        )
