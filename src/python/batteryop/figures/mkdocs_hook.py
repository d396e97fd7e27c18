"""An mkdocs hook (`hooks:` in mkdocs.yml) that draws the site's diagrams and plots at build time.

In a page's Markdown:

- a fenced block ```` ```dot NAME ```` holds Graphviz source; it becomes the diagram, inline
  SVG (`graphviz.render_svg`). ```` ```sequence NAME ```` holds a sequence diagram's lines
  (`sequence.sequence_svg` draws it). The operator's hook, listed before this one, turns
  `<!-- reconcile-diagram: claims -->` into such a block.
- `<!-- figure: install -->` becomes the install diagram (`install.install_dot`), drawn from the
  rendered `install.yaml`.
- `<!-- plot: NAME -->` becomes the plot `NAME` of `plots.PLOTS`, drawn from the benchmark
  figures recorded in `docs/dev/results/`, with when, where and how they were measured as
  its caption.

A figure that cannot be drawn fails the build (`GraphvizError`, `PlotError`). Markdown would
wrap or escape an SVG put in its text, so each figure goes in as an empty placeholder `div`
and its SVG replaces that in the page's HTML (`on_page_content`).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from typing import Any

# mkdocs loads a hook by its path; make the package it belongs to importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from batteryop.figures import install, plots
from batteryop.figures.graphviz import render_svg
from batteryop.figures.sequence import sequence_svg

FENCE = re.compile(r"^```(dot|sequence) ([a-z0-9-]+)\n(.*?)^```[ \t]*$", re.M | re.S)
INSTALL = re.compile(r"<!-- figure: install -->")
PLOT = re.compile(r"<!-- plot: ([a-z0-9-]+) -->")
PLACEHOLDER = re.compile(r'<div class="bo-figure" data-figure="(\d+)"></div>')

_figures: list[str] = []
"""The drawn figures of the build, as HTML, by placeholder number."""


def figure_html(name: str, svg: str, caption: str = "") -> str:
    """One figure: the SVG scaled to the page's width, and its caption."""
    svg = re.sub(r"<svg\b", '<svg style="max-width:100%;height:auto"', svg, count=1)
    text = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="bo-figure" id="figure-{name}">{svg}{text}</figure>'


def _placeholder(figure: str) -> str:
    _figures.append(figure)
    return f'\n<div class="bo-figure" data-figure="{len(_figures) - 1}"></div>\n'


def on_page_markdown(markdown: str, **_: Any) -> str:
    def fence(m: re.Match[str]) -> str:
        kind, name, text = m.groups()
        svg = sequence_svg(text, name) if kind == "sequence" else render_svg(text, name)
        return _placeholder(figure_html(name, svg))

    markdown = FENCE.sub(fence, markdown)
    markdown = INSTALL.sub(
        lambda _m: _placeholder(
            figure_html("install", render_svg(install.install_dot(), "install"))
        ),
        markdown,
    )

    def plot(m: re.Match[str]) -> str:
        drawn = plots.draw(m.group(1))
        return _placeholder(figure_html(m.group(1), drawn.svg, drawn.caption))

    return PLOT.sub(plot, markdown)


def on_page_content(html_text: str, **_: Any) -> str:
    return PLACEHOLDER.sub(lambda m: _figures[int(m.group(1))], html_text)
