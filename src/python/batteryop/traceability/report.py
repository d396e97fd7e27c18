"""The coverage report as a Markdown page: a table per family linking each ID to its definition,
with the code and the tests that cite it. The docs site renders it at build time
(`mkdocs_hook.py`), so it always describes the tree it was built from.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from batteryop.traceability.check import Result, Trace, by_family
from batteryop.traceability.citations import Citation
from batteryop.traceability.documents import FAMILIES, Status
from batteryop.traceability.verification import Verified, effective

LABELS = {
    Verified.REAL: "real",
    Verified.OWN_FAKE: "own fake",
    Verified.DEFINITION: "definition only",
}

MAX_FILES = 6
"""Citing files listed per cell before the rest is summarised as a count."""


def render(result: Result) -> str:
    lines = [
        "# Requirement coverage",
        "",
        "Generated when the site is built, from the requirement pages and every citation in the",
        "tree (`python -m batteryop.traceability`): *code* counts comments and docstrings outside",
        "the tests, *tests* counts `@pytest.mark.req` markers. A citation negating its ID",
        '("no BA-109") counts for nothing, a range only where the ID is also cited on its own,',
        "and a planned or waived ID is neither implemented nor tested, whatever cites it",
        "(*not counted* below). Paths are relative to the repository root.",
        "",
        "*Verified* says how the strongest test of an ID checks it, from what the test uses",
        "(`batteryop.traceability.verification`): *real* runs the real thing (the real",
        "kube-apiserver and etcd, a real external tool such as kubectl, Flux or QEMU, or our own",
        "code with none of our fakes in the way); *own fake* runs our code only against our",
        "fake battery, fake flintlockd or in-memory API server; *definition only* reads a file or",
        "a constant, or a marker says it is a dry run or runs stand-ins",
        '(`@pytest.mark.req(..., by="definition")`). Every BA ID is at most *own fake*: the only',
        "battery here is ours. An ID cited in a file that still holds a `PIN-ME` placeholder",
        "value is *definition only*: what it pins cannot be built yet.",
        "",
        f"**{result.summary()}**",
        "",
        "| Family | Active | Implemented | Tested | Real | Own fake | Definition only | Waived "
        "| Withdrawn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result.counts():
        lines.append(
            f"| [{row.family}](#{row.family.lower()}) | {row.active} | {row.implemented} | "
            f"{row.tested} | {row.real} | {row.own_fake} | {row.definition} | {row.waived} | "
            f"{row.withdrawn} |"
        )
    if result.problems:
        lines += ["", "## Problems", ""]
        lines += [f"- `{problem}`" for problem in result.problems]
    grouped = by_family(result)
    for family in FAMILIES:
        traces = grouped.get(family, [])
        if not traces:
            continue
        page = traces[0].requirement.page.name
        lines += [
            "",
            f"## {family} {{#{family.lower()}}}",
            "",
            f"Defined in [{page}]({page}).",
            "",
            "| ID | Requirement | Code | Tests | Verified |",
            "|---|---|---|---|---|",
        ]
        lines += [_row(trace) for trace in traces]
    return "\n".join(lines) + "\n"


def _row(trace: Trace) -> str:
    req = trace.requirement
    ident = f"[{req.id}]({req.page.name}#{req.id})"
    text = _cell(req.text)
    if req.status is Status.WITHDRAWN:
        return f"| {ident} | *(withdrawn)* {text} | — | — | — |"
    if req.ours:
        text = f"*(ours)* {text}"
    code, tests = _places(trace.code), _tests(trace.tests)
    if trace.settled:
        tests = _places(trace.tests)
        why = (
            "*planned:* " + _places(trace.planned)
            if trace.planned
            else "*waived:* " + _cell(trace.waivers[0].reason)
        )
        code = "<br>".join(filter(None, [why, code and f"*not counted:* {code}"]))
        tests = "<br>".join(filter(None, [why, tests and f"*not counted:* {tests}"]))
    return f"| {ident} | {text} | {code or '—'} | {tests or '—'} | {_verified(trace)} |"


def _verified(trace: Trace) -> str:
    verified = trace.verified
    if verified is None:
        return "—"
    best = max(effective(c.verified or Verified.DEFINITION, c.declared).rank for c in trace.tests)
    capped = " (capped)" if verified.rank < best else ""
    return f"{LABELS[verified]}{capped}"


def _tests(citations: list[Citation]) -> str:
    """The citing tests, grouped by how they verify, strongest first."""
    by_kind: dict[Verified, list[Citation]] = defaultdict(list)
    for citation in citations:
        by_kind[effective(citation.verified or Verified.DEFINITION, citation.declared)].append(
            citation
        )
    return "<br>".join(
        f"*{LABELS[kind]}:* {_places(by_kind[kind])}"
        for kind in reversed(Verified)
        if by_kind[kind]
    )


def _places(citations: list[Citation]) -> str:
    lines: dict[Path, list[int]] = defaultdict(list)
    for citation in citations:
        lines[citation.path].append(citation.line)
    cells = [
        f"`{path}` ({', '.join(str(n) for n in sorted(set(numbers)))})"
        for path, numbers in sorted(lines.items())
    ]
    if len(cells) > MAX_FILES:
        cells = [*cells[:MAX_FILES], f"and {len(cells) - MAX_FILES} more files"]
    return "<br>".join(cells)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
