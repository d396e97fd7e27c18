"""The Manifests artifact's layout (DP-031, DP-033, DP-034), read back byte by byte."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from batteryop.release import flux

YAML = b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"


def write(out: Path) -> str:
    return flux.write_layout(
        out,
        YAML,
        tag="v1.2.3",
        source="https://example.invalid/repo",
        revision="v1.2.3@sha1:" + "a" * 40,
        created="2026-01-01T00:00:00Z",
        mtime=1_700_000_000,
    )


def blob(layout: Path, digest: str) -> bytes:
    data = (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest.removeprefix("sha256:")
    return data


@pytest.mark.req("DP-031", "DP-033", "DP-034")
def test_the_artifact_holds_install_yaml_with_flux_media_types_and_annotations(
    tmp_path: Path,
) -> None:
    digest = write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "v1.2.3"
    manifest = json.loads(blob(tmp_path, digest))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.flux.config.v1+json"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.cncf.flux.content.v1.tar+gzip"
    assert manifest["annotations"] == {
        "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
        "org.opencontainers.image.revision": "v1.2.3@sha1:" + "a" * 40,
        "org.opencontainers.image.source": "https://example.invalid/repo",
    }
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(tmp_path, layer["digest"])))) as t:
        (member,) = t.getmembers()
        assert member.name == "install.yaml" and member.isfile()
        extracted = t.extractfile(member)
        assert extracted is not None and extracted.read() == YAML


@pytest.mark.req("DP-104")
def test_equal_inputs_give_an_equal_digest(tmp_path: Path) -> None:
    assert write(tmp_path / "a") == write(tmp_path / "b")
    changed = flux.write_layout(
        tmp_path / "c",
        YAML + b"# changed\n",
        tag="v1.2.3",
        source="https://example.invalid/repo",
        revision="v1.2.3@sha1:" + "a" * 40,
        created="2026-01-01T00:00:00Z",
        mtime=1_700_000_000,
    )
    assert changed != write(tmp_path / "d")
