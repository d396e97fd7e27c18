"""An mkdocs hook (`hooks:` in mkdocs.yml): the pages list each controller's steps from the
tuples its reconcile runs (`CHAIN` and `LAST`), so the published order is the order the code
runs.

- `<!-- reconcile-steps: NAME -->` becomes the table of the chain `NAME` of
  `steps.CONTROLLERS` (`claims` and `pools` on `docs/operator.md`, `host-registry` on
  `docs/host-registry.md`); an unknown name fails the build.
- `<!-- reconcile-diagram: claims -->` becomes a ```` ```dot claim-life ```` block: the
  claim's life drawn from the same tuples (`claim_life`), which `batteryop.figures`' hook,
  listed after this one, draws as SVG.

mkdocs loads this file by its path; it makes its package importable, and the package reads
the controllers' source without importing them (`steps`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# mkdocs loads a hook by its path; make the package it belongs to importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from batteryop.docsite.claim_life import claim_life_dot
from batteryop.docsite.steps import steps_table

MARKER = re.compile(r"<!-- reconcile-steps: ([a-z-]+) -->")
DIAGRAM = re.compile(r"<!-- reconcile-diagram: claims -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = MARKER.sub(lambda m: steps_table(m.group(1)), markdown)
    return DIAGRAM.sub(lambda _m: f"```dot claim-life\n{claim_life_dot()}```\n", markdown)
