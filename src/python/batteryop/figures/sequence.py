"""Sequence diagrams written as plain lines in a page, drawn with Graphviz.

A ```` ```sequence NAME ```` block in a page holds:

    participants: client=the client | agent=Exec Agent | api=kube-apiserver
    client -> agent: ExecCommand, a Bearer token
    agent -> agent: checks the token's own claims
    agent -> api: TokenReview

The first line names the participants left to right (`id=label`, separated by `|`); every other
non-empty line is one message, top to bottom (`\\n` in a text breaks its line). A message to oneself is a note on that
participant's line. `dot` lays out a grid: one row per message, one column per participant,
dashed lifelines down each column, messages as edges within their row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def _quote(text: str) -> str:
    """`text` inside a quoted dot label; `\\n` in it stays a line break."""
    return text.replace('"', '\\"')


def sequence_dot(text: str) -> str:
    """Graphviz source of the sequence diagram `text` (the block's content)."""
    participants, messages = parse(text)
    order = {ident: n for n, (ident, _) in enumerate(participants)}
    rows = len(messages) + 2
    out = [
        "digraph sequence {",
        "  newrank=true; nodesep=0.9; ranksep=0.18; splines=false;",
        '  node [shape=point, width=0.01, color="#888888"];',
        "  edge [arrowsize=0.7];",
    ]
    notes = {(n + 1, m.sender) for n, m in enumerate(messages) if m.sender == m.receiver}
    for ident, label in participants:
        for r in range(rows):
            node = f"{ident}_{r}"
            if r in (0, rows - 1):
                style = 'shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#3f51b5"'
                out.append(f'  {node} [{style}, label="{_quote(label)}", width=0.8];')
            elif (r, ident) in notes:
                note = next(m.text for n, m in enumerate(messages) if n + 1 == r)
                out.append(
                    f'  {node} [shape=note, style=filled, fillcolor="#fffbe6", color="#c9a400",'
                    f' fontsize=9, width=0.5, label="{_quote(note)}"];'
                )
        chain = " -> ".join(f"{ident}_{r}" for r in range(rows))
        out.append(f'  {chain} [arrowhead=none, style=dashed, color="#aaaaaa", weight=100];')
    for r in range(rows):
        out.append(f"  {{ rank=same; {'; '.join(f'{i}_{r}' for i, _ in participants)}; }}")
    heads = " -> ".join(f"{ident}_0" for ident, _ in participants)
    out.append(f"  {heads} [style=invis];")
    for n, m in enumerate(messages, start=1):
        if m.sender == m.receiver:
            continue
        left, right = sorted((m.sender, m.receiver), key=order.__getitem__)
        back = "dir=back, " if left == m.receiver else ""
        out.append(f'  {left}_{n} -> {right}_{n} [{back}label="{_quote(m.text)}", fontsize=9];')
    out.append("}")
    return "\n".join(out) + "\n"
