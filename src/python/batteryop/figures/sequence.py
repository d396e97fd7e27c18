"""Sequence diagrams written as plain lines in a page, drawn as SVG at the page's width.

A ```` ```sequence NAME ```` block in a page holds:

    participants: client=the client | agent=Exec Agent | api=kube-apiserver
    client -> agent: ExecCommand, a Bearer token
    agent -> agent: checks the token's own claims
    agent -> api: TokenReview

The first line names the participants left to right (`id=label`, separated by `|`); every other
non-empty line is one message, top to bottom (`\\n` in a text breaks its line). A message to
oneself is a note on that participant's line.

`sequence_svg` draws it itself (Graphviz's `dot` lays out graphs, not time: its labels of
messages between neighbours overlapped and messages past a column bent): one column per
participant across `WIDTH` pixels, its box at the top and the bottom and a dashed lifeline
between, one row per message down the page. A message's text is broken to fit over its
arrow, a note's to fit its box, and each row is as tall as its text, so nothing overlaps and
the diagram is drawn at its own size on a page about 690 px wide: text at `FONT_PX`.
"""

from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass
from typing import Final

WIDTH: Final = 680
"""The diagram's width in pixels: the page's text width at the widths the site is read at."""
FONT_PX: Final = 12
LINE_PX: Final = 15
CHAR_PX: Final = 0.5 * FONT_PX
"""A character's width on average in Helvetica and Arial, to break lines by."""
FONT: Final = "Helvetica, Arial, sans-serif"
_PAD, _GAP, _MARGIN = 6, 10, 4

_MESSAGE = re.compile(r"^(\w[\w-]*)\s*->\s*(\w[\w-]*)\s*:\s*(.+)$")


class SequenceError(ValueError):
    """A sequence block that cannot be read; the message names the line."""


@dataclass(frozen=True)
class Message:
    sender: str
    receiver: str
    text: str


def parse(text: str) -> tuple[list[tuple[str, str]], list[Message]]:
    """The participants (id, label) in order, and the messages in order."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or not lines[0].startswith("participants:"):
        raise SequenceError("a sequence starts with a `participants:` line")
    participants = []
    for part in lines[0].removeprefix("participants:").split("|"):
        ident, _, label = part.strip().partition("=")
        participants.append((ident.strip(), label.strip() or ident.strip()))
    known = {ident for ident, _ in participants}
    messages = []
    for line in lines[1:]:
        m = _MESSAGE.match(line)
        if m is None:
            raise SequenceError(f"not `a -> b: text`: {line!r}")
        if not {m.group(1), m.group(2)} <= known:
            raise SequenceError(f"a participant not named on the first line: {line!r}")
        messages.append(Message(m.group(1), m.group(2), m.group(3)))
    return participants, messages


def _lines(text: str, width_px: float) -> list[str]:
    """`text` broken into lines that fit `width_px`; its own `\\n` breaks are kept."""
    chars = max(8, int(width_px / CHAR_PX))
    return [wrapped for line in text.split("\\n") for wrapped in textwrap.wrap(line, chars) or [""]]


def _text(lines: list[str], x: float, top: float, **attrs: str) -> list[str]:
    """One `<text>` per line, centred on `x`, the first line's top at `top`."""
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return [
        f'<text x="{x:.1f}" y="{top + (n + 1) * LINE_PX - 4:.1f}" text-anchor="middle"'
        f' font-family="{FONT}" font-size="{FONT_PX}"{extra}>{html.escape(line)}</text>'
        for n, line in enumerate(lines)
    ]


def sequence_svg(text: str, name: str) -> str:
    """The sequence diagram `text` (the block's content) as SVG, ids prefixed with `name-`."""
    participants, messages = parse(text)
    column = (WIDTH - 2 * _MARGIN) / len(participants)
    x = {ident: _MARGIN + (n + 0.5) * column for n, (ident, _) in enumerate(participants)}
    heads = {ident: _lines(label, column - 2 * _PAD - 4) for ident, label in participants}
    head_h = max(len(lines) for lines in heads.values()) * LINE_PX + 2 * _PAD
    body: list[str] = []
    y = head_h + _GAP
    for m in messages:
        if m.sender == m.receiver:
            width = min(1.8 * column, WIDTH - 2 * _MARGIN)
            left = min(max(x[m.sender] - width / 2, _MARGIN), WIDTH - _MARGIN - width)
            lines = _lines(m.text, width - 2 * _PAD)
            height = len(lines) * LINE_PX + 2 * _PAD
            body.append(
                f'<rect x="{left:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height}"'
                ' fill="#fffbe6" stroke="#c9a400"/>'
            )
            body += _text(lines, left + width / 2, y + _PAD)
            y += height + _GAP
            continue
        a, b = x[m.sender], x[m.receiver]
        lines = _lines(m.text, abs(b - a) - 2 * _PAD)
        body += _text(lines, (a + b) / 2, y)
        y += len(lines) * LINE_PX + 3
        body.append(
            f'<line x1="{a:.1f}" y1="{y:.1f}" x2="{b:.1f}" y2="{y:.1f}" stroke="#333333"'
            f' marker-end="url(#{name}-arrow)"/>'
        )
        y += _GAP + 4
    foot = y + _GAP
    height = foot + head_h + _MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}"'
        f' viewBox="0 0 {WIDTH} {height:.0f}" id="{name}-sequence">',
        f'<defs><marker id="{name}-arrow" viewBox="0 0 10 10" refX="10" refY="5"'
        ' markerWidth="8" markerHeight="8" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#333333"/></marker></defs>',
    ]
    for ident, lines in heads.items():
        out.append(
            f'<line x1="{x[ident]:.1f}" y1="{head_h:.1f}" x2="{x[ident]:.1f}" y2="{foot:.1f}"'
            ' stroke="#aaaaaa" stroke-dasharray="5,4"/>'
        )
        width = column - 8
        for top in (0.0, foot):
            out.append(
                f'<rect x="{x[ident] - width / 2:.1f}" y="{top + 1:.1f}" width="{width:.1f}"'
                f' height="{head_h - 2}" rx="8" fill="#eef3fb" stroke="#3f51b5"/>'
            )
            offset = (head_h - len(lines) * LINE_PX) / 2
            out += _text(lines, x[ident], top + offset)
    out += body
    out.append("</svg>")
    return "\n".join(out)
