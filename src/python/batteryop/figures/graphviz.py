"""Graphviz `dot` source to SVG that can sit inline in a page.

`dot` comes from Debian's `graphviz` package (.ci/run installs it). Every diagram gets the same
fonts from the command line, so sources name only what they draw. Element ids are prefixed
with the diagram's own name, so two diagrams on one page never share an id.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Final

FONT: Final = "Helvetica"
DEFAULTS: Final = (
    f"-Gfontname={FONT}",
    f"-Nfontname={FONT}",
    f"-Efontname={FONT}",
    "-Gfontsize=11",
    "-Nfontsize=11",
    "-Efontsize=10",
    "-Gbgcolor=transparent",
)

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_ID = re.compile(r'\bid="([^"]*)"')


class GraphvizError(RuntimeError):
    """`dot` is missing, or refused the source (its message says why)."""


def render_svg(source: str, name: str) -> str:
    """`source` drawn by `dot -Tsvg`, without the XML prolog, ids prefixed with `name-`."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizError(
            "Graphviz's dot is not on PATH: install Debian's graphviz package (.ci/run does)"
        )
    out = subprocess.run(
        [dot, "-Tsvg", *DEFAULTS],
        input=source,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise GraphvizError(f"dot refused the diagram {name!r}: {out.stderr.strip()}")
    svg = _PROLOG.sub("", out.stdout, count=1)
    return _ID.sub(lambda m: f'id="{name}-{m.group(1)}"', svg)
