"""The Manifests artifact (DP-030..DP-034): `install.yaml` as a Flux OCI artifact.

What `flux push artifact` makes, written directly as an OCI layout (no registry needed): one
layer, a gzipped tar holding only `install.yaml` (DP-031), media type
`application/vnd.cncf.flux.content.v1.tar+gzip`; a config of media type
`application/vnd.cncf.flux.config.v1+json` (DP-033); and the manifest annotations
`org.opencontainers.image.source` (the repository URL), `org.opencontainers.image.revision`
(`<version>@sha1:<commit>`) and `org.opencontainers.image.created` (DP-034). Every byte follows
from the inputs (file time, owner and gzip header fixed), so equal inputs give equal digests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any, Final

CONFIG_MEDIA_TYPE: Final = "application/vnd.cncf.flux.config.v1+json"  # DP-033
LAYER_MEDIA_TYPE: Final = "application/vnd.cncf.flux.content.v1.tar+gzip"  # DP-033
MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
FILE_NAME: Final = "install.yaml"  # DP-031
SOURCE_ANNOTATION: Final = "org.opencontainers.image.source"
REVISION_ANNOTATION: Final = "org.opencontainers.image.revision"
CREATED_ANNOTATION: Final = "org.opencontainers.image.created"
REF_ANNOTATION: Final = "org.opencontainers.image.ref.name"


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def layer(install_yaml: bytes, mtime: int) -> bytes:
    """A gzipped tar holding only install.yaml, owned by root, mode 0644, at `mtime`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(FILE_NAME)
        info.size = len(install_yaml)
        info.mode = 0o644
        info.mtime = mtime
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(install_yaml))
    return gzip.compress(raw.getvalue(), mtime=0)


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
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    config = b"{}"
    content = layer(install_yaml, mtime)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": _descriptor(CONFIG_MEDIA_TYPE, config),
        "layers": [_descriptor(LAYER_MEDIA_TYPE, content)],
        "annotations": {
            CREATED_ANNOTATION: created,
            REVISION_ANNOTATION: revision,
            SOURCE_ANNOTATION: source,
        },
    }
    manifest_bytes = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    for data in (config, content, manifest_bytes):
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    descriptor = _descriptor(MANIFEST_MEDIA_TYPE, manifest_bytes)
    descriptor["annotations"] = {REF_ANNOTATION: tag}
    index = {"schemaVersion": 2, "manifests": [descriptor]}
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}', encoding="utf-8")
    (out / "index.json").write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
    return str(descriptor["digest"])
