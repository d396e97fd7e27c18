"""An OCI artifact of one config and one layer, written directly as an OCI layout.

The Manifests artifact for Flux (`flux`) and the Helm chart (`chart`) are both this shape:
`write_layout` stores the config, the layer and the manifest as blobs, and an index naming the
manifest under its tag; `tar_gz` makes a layer of files. Every byte follows from the inputs
(file times, owner and the gzip header fixed), so equal inputs give equal digests (DP-104).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
SOURCE_ANNOTATION: Final = "org.opencontainers.image.source"
REVISION_ANNOTATION: Final = "org.opencontainers.image.revision"
CREATED_ANNOTATION: Final = "org.opencontainers.image.created"
REF_ANNOTATION: Final = "org.opencontainers.image.ref.name"


def descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def tar_gz(files: Mapping[str, bytes], mtime: int) -> bytes:
    """A gzipped tar of `files` (path → content) in the order given, each owned by root,
    mode 0644, at `mtime`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def write_layout(
    out: Path,
    *,
    config: tuple[str, bytes],
    layer: tuple[str, bytes],
    annotations: Mapping[str, str],
    tag: str,
) -> str:
    """Write the artifact (config and layer as `(media type, bytes)`) as an OCI layout in `out`
    under `tag`; returns the manifest's digest."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": descriptor(*config),
        "layers": [descriptor(*layer)],
        "annotations": dict(annotations),
    }
    manifest_bytes = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    for data in (config[1], layer[1], manifest_bytes):
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    entry = descriptor(MANIFEST_MEDIA_TYPE, manifest_bytes)
    entry["annotations"] = {REF_ANNOTATION: tag}
    index = {"schemaVersion": 2, "manifests": [entry]}
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}', encoding="utf-8")
    (out / "index.json").write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
    return str(entry["digest"])
