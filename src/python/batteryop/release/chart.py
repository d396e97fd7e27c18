"""The Helm chart as the release ships it (DP-115): a chart archive and an OCI chart artifact.

`archive(chart, mtime)` is what `helm package` makes: a gzipped tar of the chart's files under
one folder named after the chart (`battery-operator/Chart.yaml`, ...), here with every file's
time and owner fixed so equal inputs give equal bytes. `write_layout` stores that archive as
`helm push` stores a chart in a registry, written directly as an OCI layout (`artifact`): the
layer of media type `application/vnd.cncf.helm.chart.content.v1.tar+gzip`, a config of media
type `application/vnd.cncf.helm.config.v1+json` holding Chart.yaml's fields as JSON, tagged
with the chart's version (Helm looks a chart version up by that tag), and the manifest
annotations Helm writes (title, version, description, created, source) plus the revision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from batteryop.manifests import chart as charts
from batteryop.release import artifact

CONFIG_MEDIA_TYPE: Final = "application/vnd.cncf.helm.config.v1+json"
LAYER_MEDIA_TYPE: Final = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
REPOSITORY: Final = f"charts/{charts.NAME}"
"""Where the chart sits beside the images: `<registry>/charts/battery-operator:<version>`, as
`helm push <archive> oci://<registry>/charts` names it."""
TITLE_ANNOTATION: Final = "org.opencontainers.image.title"
VERSION_ANNOTATION: Final = "org.opencontainers.image.version"
DESCRIPTION_ANNOTATION: Final = "org.opencontainers.image.description"


def archive_name(version: str) -> str:
    """`battery-operator-<version>.tgz`, the name `helm package` gives."""
    return f"{charts.NAME}-{version}.tgz"


def archive(chart: charts.Chart, mtime: int) -> bytes:
    """The chart archive: every file under `battery-operator/`, Chart.yaml first."""
    files = {f"{charts.NAME}/{path}": text.encode() for path, text in chart.items()}
    first = f"{charts.NAME}/Chart.yaml"
    return artifact.tar_gz({first: files.pop(first), **files}, mtime)


def write_layout(
    out: Path, chart: charts.Chart, data: bytes, *, revision: str, created: str
) -> str:
    """The OCI chart artifact of the archive `data` in the layout `out`; its manifest digest."""
    meta = chart.metadata
    return artifact.write_layout(
        out,
        config=(CONFIG_MEDIA_TYPE, json.dumps(meta, separators=(",", ":")).encode()),
        layer=(LAYER_MEDIA_TYPE, data),
        annotations={
            TITLE_ANNOTATION: str(meta["name"]),
            VERSION_ANNOTATION: str(meta["version"]),
            DESCRIPTION_ANNOTATION: str(meta["description"]),
            artifact.CREATED_ANNOTATION: created,
            artifact.SOURCE_ANNOTATION: str(meta["home"]),
            artifact.REVISION_ANNOTATION: revision,
        },
        tag=str(meta["version"]),
    )
