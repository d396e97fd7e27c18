"""The check: every citation names a defined requirement, every waiver gives a reason, and
per family how many active requirements are implemented and tested.

It fails on:
- an ID (or a range end) that no requirement page defines;
- a waiver with no reason;
- a test marker naming a withdrawn requirement (nothing can test what no longer holds);
- a requirement page line that looks like an entry but breaks the form.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from batteryop.traceability.citations import Citation, Kind, scan_tree
from batteryop.traceability.documents import (
    FAMILIES,
    Catalogue,
    Problem,
    Requirement,
    Status,
    read_pages,
)

MIN_REASON = 10
"""A waiver's reason must say something: at least this many characters."""


@dataclass
class Trace:
    """What cites one requirement."""

    requirement: Requirement
    code: list[Citation] = field(default_factory=list)
    tests: list[Citation] = field(default_factory=list)
    waivers: list[Citation] = field(default_factory=list)
    planned: list[Citation] = field(default_factory=list)


@dataclass(frozen=True)
class FamilyCount:
    family: str
    active: int
    implemented: int
    tested: int
    waived: int
    withdrawn: int


@dataclass(frozen=True)
class Result:
    traces: dict[str, Trace]
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def counts(self) -> list[FamilyCount]:
        rows = []
        for family in FAMILIES:
            mine = [t for t in self.traces.values() if t.requirement.family == family]
            active = [t for t in mine if t.requirement.status is Status.ACTIVE]
            rows.append(
                FamilyCount(
                    family=family,
                    active=len(active),
                    implemented=sum(1 for t in active if t.code),
                    tested=sum(1 for t in active if t.tests),
                    waived=sum(1 for t in active if t.waivers),
                    withdrawn=len(mine) - len(active),
                )
            )
        return rows

    def summary(self) -> str:
        """One line: the totals, then each family as implemented/tested/active."""
        rows = self.counts()
        active = sum(r.active for r in rows)
        implemented = sum(r.implemented for r in rows)
        tested = sum(r.tested for r in rows)
        waived = sum(r.waived for r in rows)

        def pct(n: int) -> str:
            return f"{100 * n // active}%" if active else "0%"

        families = " ".join(f"{r.family} {r.implemented}/{r.tested}/{r.active}" for r in rows)
        return (
            f"requirements: {active} active, {implemented} implemented ({pct(implemented)}), "
            f"{tested} tested ({pct(tested)}), {waived} waived, {len(self.problems)} problems; "
            f"per family implemented/tested/active: {families}"
        )


def check_tree(root: Path) -> Result:
    """Read the requirement pages and every citation under `root`, and check them."""
    return check(read_pages(root), scan_tree(root))


def check(catalogue: Catalogue, citations: Iterable[Citation]) -> Result:
    traces = {rid: Trace(req) for rid, req in sorted(catalogue.requirements.items())}
    problems = list(catalogue.problems)
    seen: dict[tuple[str, Path, int, Kind], None] = {}
    for citation in citations:
        for rid in _expand(catalogue, citation, problems):
            key = (rid, citation.path, citation.line, citation.kind)
            if key in seen:
                continue
            seen[key] = None
            _record(traces[rid], citation, problems)
    return Result(traces, tuple(dict.fromkeys(problems)))


def _expand(catalogue: Catalogue, citation: Citation, problems: list[Problem]) -> list[str]:
    ends = [citation.id] if citation.last is None else [citation.id, citation.last]
    unknown = [end for end in ends if end not in catalogue.requirements]
    for end in unknown:
        problems.append(
            Problem(citation.path, citation.line, f"{end}: no requirement page defines it")
        )
    if unknown:
        return []
    if citation.last is None:
        return [citation.id]
    if int(citation.last[3:]) < int(citation.id[3:]):
        problems.append(
            Problem(citation.path, citation.line, f"{citation.id}..{citation.last}: empty range")
        )
        return []
    return catalogue.in_range(citation.id, citation.last)


def _record(trace: Trace, citation: Citation, problems: list[Problem]) -> None:
    requirement = trace.requirement
    if citation.kind is Kind.WAIVER:
        if len(citation.reason) < MIN_REASON:
            problems.append(
                Problem(citation.path, citation.line, f"waiver of {requirement.id} gives no reason")
            )
        else:
            trace.waivers.append(citation)
        return
    if requirement.status is Status.WITHDRAWN:
        if citation.kind is Kind.TEST:
            problems.append(
                Problem(
                    citation.path,
                    citation.line,
                    f"{requirement.id} is withdrawn; a test cannot check it",
                )
            )
        return  # prose may still say that something was withdrawn
    if citation.kind is Kind.PLANNED:
        trace.planned.append(citation)
    elif citation.kind is Kind.CODE:
        trace.code.append(citation)
    elif citation.kind is Kind.TEST:
        trace.tests.append(citation)


def by_family(result: Result) -> dict[str, list[Trace]]:
    grouped: dict[str, list[Trace]] = defaultdict(list)
    for trace in result.traces.values():
        grouped[trace.requirement.family].append(trace)
    return grouped
