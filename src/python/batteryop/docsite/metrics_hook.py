"""An mkdocs hook (`hooks:` in mkdocs.yml) that adds `metrics.md`, the metrics reference,
rendered from the metric definitions (`batteryop.obs.exported`) of the tree being built: a
metric cannot be exported without its line on the page.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# mkdocs loads a hook by its path; make the package it belongs to importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from batteryop.obs import catalog, exported

PAGE = "metrics.md"

INTRO = """# Metrics reference

Every metric the components export on their `/metrics` endpoint (the operator, each Exec
Agent, the CSR approver and the host registry), as Prometheus scrapes it. This page is rendered
from the metric definitions in the code (`batteryop.obs.exported`) when the site is built, so it
lists exactly what the release exports. Labels are bounded: no object, user or Node names.
Histograms add the `_bucket`, `_sum` and `_count` series; counters their `_created` series.

The alert rules that read these metrics, and what to do when one fires, are on the
[Operations](operations.md) page.

"""


def page() -> str:
    return INTRO + catalog.reference(exported.SECTIONS)


def on_files(files: Files, config: Any, **_: Any) -> Files:
    files.append(File.generated(config, PAGE, content=page()))
    return files
