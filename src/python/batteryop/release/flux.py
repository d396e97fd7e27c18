"""The Manifests artifact (DP-030..DP-034): `install.yaml` as a Flux OCI artifact.

What `flux push artifact` makes, written directly as an OCI layout (no registry needed): one
layer, a gzipped tar holding only `install.yaml` (DP-031), media type
`application/vnd.cncf.flux.content.v1.tar+gzip`; a config of media type
`application/vnd.cncf.flux.config.v1+json` (DP-033); and the manifest annotations
`org.opencontainers.image.source` (the repository URL), `org.opencontainers.image.revision`
(`<version>@sha1:<commit>`) and `org.opencontainers.image.created` (DP-034). Every byte follows
from the inputs (`artifact`: file time, owner and gzip header fixed), so equal inputs give equal
digests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from batteryop.release import artifact

CONFIG_MEDIA_TYPE: Final = "application/vnd.cncf.flux.config.v1+json"  # DP-033
LAYER_MEDIA_TYPE: Final = "application/vnd.cncf.flux.content.v1.tar+gzip"  # DP-033
MANIFEST_MEDIA_TYPE: Final = artifact.MANIFEST_MEDIA_TYPE
FILE_NAME: Final = "install.yaml"  # DP-031
SOURCE_ANNOTATION: Final = artifact.SOURCE_ANNOTATION
REVISION_ANNOTATION: Final = artifact.REVISION_ANNOTATION
CREATED_ANNOTATION: Final = artifact.CREATED_ANNOTATION
REF_ANNOTATION: Final = artifact.REF_ANNOTATION


def layer(install_yaml: bytes, mtime: int) -> bytes:
    """A gzipped tar holding only install.yaml, owned by root, mode 0644, at `mtime`."""
    return artifact.tar_gz({FILE_NAME: install_yaml}, mtime)


def write_layout(
    out: Path,
    install_yaml: bytes,
    *,
    tag: str,
    source: str,
    revision: str,
    created: str,
    mtime: int,
) -> str:
    """Write the artifact as an OCI layout in `out` under `tag`; returns the manifest digest.

    `revision` is DP-034's `<version>@sha1:<commit>`; `created` is RFC 3339.
    """
    return artifact.write_layout(
        out,
        config=(CONFIG_MEDIA_TYPE, b"{}"),
        layer=(LAYER_MEDIA_TYPE, layer(install_yaml, mtime)),
        annotations={
            CREATED_ANNOTATION: created,
            REVISION_ANNOTATION: revision,
            SOURCE_ANNOTATION: source,
        },
        tag=tag,
    )
