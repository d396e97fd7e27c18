"""The coverage report as a Markdown page: a table per family linking each ID to its definition,
with the code and the tests that cite it. The docs site renders it at build time
(`mkdocs_hook.py`), so it always describes the tree it was built from.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from batteryop.traceability.check import LABELS, Result, Trace, by_family
from batteryop.traceability.citations import Citation
from batteryop.traceability.documents import FAMILIES, Status
from batteryop.traceability.verification import Verified, effective

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
        "*Verified* says how the weakest test of an ID checks it (and, where it differs, the",
        "strongest), from what each test starts (`batteryop.traceability.verification`):",
        "*real* starts a real external part (the real kube-apiserver and etcd, the real node,",
        "QEMU, Flux, buildah) and none of our fakes; *own fake* starts our fake battery, fake",
        "flintlockd or in-memory API server, alone or beside real parts (the local stack and",
        "the dev stack run the fake battery); *unit* calls our code and starts nothing external;",
        "*definition only* reads a file, a constant or rendered output (`manifests.render()`),",
        'or a marker says it is a dry run or runs stand-ins (`by="definition"`). The weakest',
        "test decides, so an ID with one text check among real tests shows as *definition only*:",
        "the report errs low, never high. Every BA ID is at most *own fake*: the only battery",
        "here is ours. An ID implemented in an image that still holds a `PIN-ME` placeholder",
        "value is *definition only* (*capped*): what it pins cannot be built yet. A TD ID (the",
        "test doubles and layers) is implemented by the tests that cite it.",
        "",
        f"**{result.summary()}**",
        "",
        "Real, own fake, unit and definition only count the tested IDs by their weakest test;",
        "*strongest* counts them by their strongest, in the same order.",
        "",
        "| Family | Active | Implemented | Tested | Real | Own fake | Unit | Definition only "
        "| Strongest | Waived | Withdrawn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result.counts():
        strongest = "/".join(str(row.strongest[v]) for v in reversed(Verified))
        lines.append(
            f"| [{row.family}](#{row.family.lower()}) | {row.active} | {row.implemented} | "
            f"{row.tested} | {row.real} | {row.own_fake} | {row.unit} | {row.definition} | "
            f"{strongest} | {row.waived} | {row.withdrawn} |"
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
    if trace.implemented_by_tests and not code:
        code = "*by its tests*"
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
    """The weakest kind, the strongest where it differs, and whether a cap lowered them."""
    verified, strongest = trace.verified, trace.strongest
    if verified is None or strongest is None:
        return "—"
    kinds = trace.kinds()
    uncapped = (min(kinds, key=_rank), max(kinds, key=_rank))
    text = LABELS[verified] + (" (capped)" if uncapped != (verified, strongest) else "")
    if strongest != verified:
        text += f"<br>*strongest:* {LABELS[strongest]}"
    return text


def _rank(verified: Verified) -> int:
    return verified.rank


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
