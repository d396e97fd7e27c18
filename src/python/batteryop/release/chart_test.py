"""The chart archive and the OCI chart artifact, read back byte by byte.

That Helm itself renders the release's install.yaml from them, the archive and the chart pushed
to a registry, is tested in tests/release (DP-115); the chart's contents in manifests/chart_test.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import yaml

from batteryop.manifests import chart as charts
from batteryop.manifests import render
from batteryop.release import artifact, chart

DIGEST = "sha256:" + "a" * 64
REVISION = "v0.5.0@sha1:" + "b" * 40


def build() -> charts.Chart:
    return charts.build(
        app_version="v0.5.0",
        source="https://example.invalid/repo",
        operator_image=f"registry.example/battery-operator:v0.5.0@{DIGEST}",
        host_registry_image="registry.example/battery-operator/host-registry:v0.5.0",
        exec_agent_image="registry.example/battery-operator/exec-agent:v0.5.0",
        csr_approver_image="registry.example/battery-operator/csr-approver:v0.5.0",
    )


def test_the_archive_holds_the_chart_under_its_name_chart_yaml_first() -> None:
    built = build()
    data = chart.archive(built, 1_700_000_000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        assert members[0].name == "battery-operator/Chart.yaml"
        assert sorted(m.name for m in members) == sorted(
            f"battery-operator/{p}" for p in built.files
        )
        assert {m.mtime for m in members} == {1_700_000_000}
        values = tar.extractfile("battery-operator/values.yaml")
        assert values is not None
        operator = yaml.safe_load(values.read())["images"]["operator"]
    assert operator["digest"] == DIGEST and operator["tag"] == "v0.5.0"
    assert chart.archive_name(built.version) == "battery-operator-0.5.0.tgz"
    assert chart.archive(build(), 1_700_000_000) == data  # DP-104: equal inputs, equal bytes


def test_the_layout_is_an_oci_chart_tagged_with_its_version(tmp_path: Path) -> None:
    built = build()
    data = chart.archive(built, 1_700_000_000)
    digest = chart.write_layout(
        tmp_path, built, data, revision=REVISION, created="2026-01-01T00:00:00Z"
    )
    (entry,) = json.loads((tmp_path / "index.json").read_text())["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"][artifact.REF_ANNOTATION] == "0.5.0"
    blobs = tmp_path / "blobs" / "sha256"
    manifest = json.loads((blobs / digest.removeprefix("sha256:")).read_bytes())
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    assert (blobs / layer["digest"].removeprefix("sha256:")).read_bytes() == data
    config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_bytes())
    assert config["name"] == "battery-operator" and config["version"] == "0.5.0"
    assert config["appVersion"] == "v0.5.0"
    assert manifest["annotations"][artifact.REVISION_ANNOTATION] == REVISION
    assert manifest["annotations"][chart.VERSION_ANNOTATION] == "0.5.0"
    gzip.decompress(data)  # the layer is the gzipped archive itself, as `helm push` stores it


def test_the_snapshot_chart_has_the_snapshot_tag() -> None:
    built = charts.build(
        app_version="v0.4.1", source="x", operator_image=render.SNAPSHOT_OPERATOR_IMAGE
    )
    assert chart.archive_name(built.version) == "battery-operator-0.4.1.tgz"
