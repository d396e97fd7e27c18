"""The check: every citation names a defined requirement, every waiver gives a reason, and
per family how many active requirements are implemented and tested.

It fails on:
- an ID (or a range end) that no requirement page defines;
- a waiver with no reason;
- a test marker naming a withdrawn requirement (nothing can test what no longer holds);
- a requirement page line that looks like an entry but breaks the form.

What counts (`Trace.implemented`, `Trace.tested`): an active requirement is implemented when a
code citation names it and tested when a test marker names it, unless something marks it
`planned(...)` or waives it: then it is neither, whatever else cites it. A requirement of a
family in `TESTS_IMPLEMENT` (the test doubles and layers, TD) is also implemented by a test that
cites it: what such a requirement asks for is the test and the harness it runs. A range credits
an ID only when a citation of the same kind also names that ID on its own (`citations`
explains), so ranges add places to the report but never a count.

How a tested ID is verified (`Trace.verified`) is the weakest kind among the tests that cite
it, under its caps; `Trace.strongest` is the strongest, for a reader who wants both.
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
from batteryop.traceability.verification import FAMILY_CAPS, Verified, effective

TESTS_IMPLEMENT = frozenset({"TD"})
"""Families whose requirements ask for tests and their harness: a citing test implements one."""

LABELS = {
    Verified.REAL: "real",
    Verified.OWN_FAKE: "own fake",
    Verified.UNIT: "unit",
    Verified.DEFINITION: "definition only",
}

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

    @property
    def settled(self) -> bool:
        """Planned or waived: neither built nor tested here, whatever cites it."""
        return bool(self.planned or self.waivers)

    @property
    def implemented(self) -> bool:
        return bool(self.code or self.implemented_by_tests) and not self.settled

    @property
    def implemented_by_tests(self) -> bool:
        """A test double or test layer requirement fulfilled by the tests that cite it."""
        return self.requirement.family in TESTS_IMPLEMENT and bool(self.tests)

    @property
    def tested(self) -> bool:
        return bool(self.tests) and not self.settled

    @property
    def verified(self) -> Verified | None:
        """How its weakest test verifies it, under its caps (`caps`); None when untested."""
        if not self.tested:
            return None
        return min([*self.kinds(), *self.caps()], key=_rank)

    @property
    def strongest(self) -> Verified | None:
        """How its strongest test verifies it, under its caps; None when untested."""
        if not self.tested:
            return None
        return min([max(self.kinds(), key=_rank), *self.caps()], key=_rank)

    def kinds(self) -> list[Verified]:
        """How each citing test verifies, lowered by its marker's `by=`."""
        return [effective(c.verified or Verified.DEFINITION, c.declared) for c in self.tests]

    def caps(self) -> list[Verified]:
        """The most its tests can show: battery's IDs only ever meet our fake, and an ID
        implemented in an artifact that still holds a `PIN-ME` value (an image with an unpinned
        `versions.env`) describes something not yet buildable."""
        caps = [FAMILY_CAPS[f] for f in [self.requirement.family] if f in FAMILY_CAPS]
        if any(c.unpinned for c in self.code):
            caps.append(Verified.DEFINITION)
        return caps


def _rank(verified: Verified) -> int:
    return verified.rank


@dataclass(frozen=True)
class FamilyCount:
    family: str
    active: int
    implemented: int
    tested: int
    waived: int
    withdrawn: int
    weakest: dict[Verified, int]
    """Tested IDs by the kind of their weakest test (the report's headline)."""
    strongest: dict[Verified, int]
    """Tested IDs by the kind of their strongest test."""

    @property
    def real(self) -> int:
        return self.weakest[Verified.REAL]

    @property
    def own_fake(self) -> int:
        return self.weakest[Verified.OWN_FAKE]

    @property
    def unit(self) -> int:
        return self.weakest[Verified.UNIT]

    @property
    def definition(self) -> int:
        return self.weakest[Verified.DEFINITION]


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
            weakest = [t.verified for t in active]
            strongest = [t.strongest for t in active]
            rows.append(
                FamilyCount(
                    family=family,
                    active=len(active),
                    implemented=sum(1 for t in active if t.implemented),
                    tested=sum(1 for t in active if t.tested),
                    waived=sum(1 for t in active if t.waivers),
                    withdrawn=len(mine) - len(active),
                    weakest={v: weakest.count(v) for v in Verified},
                    strongest={v: strongest.count(v) for v in Verified},
                )
            )
        return rows

    def totals(self, strongest: bool = False) -> dict[Verified, int]:
        """Tested IDs per kind, over every family, by their weakest (or strongest) test."""
        rows = self.counts()
        return {
            v: sum((r.strongest if strongest else r.weakest)[v] for r in rows) for v in Verified
        }

    def summary(self) -> str:
        """One line: the totals, the tested split by how their weakest and their strongest
        tests verify them, then each family as implemented/tested/active."""
        rows = self.counts()
        active = sum(r.active for r in rows)
        implemented = sum(r.implemented for r in rows)
        tested = sum(r.tested for r in rows)
        waived = sum(r.waived for r in rows)

        def pct(n: int) -> str:
            return f"{100 * n // active}%" if active else "0%"

        def split(counts: dict[Verified, int]) -> str:
            return ", ".join(f"{LABELS[v]} {counts[v]}" for v in reversed(Verified))

        families = " ".join(f"{r.family} {r.implemented}/{r.tested}/{r.active}" for r in rows)
        return (
            f"requirements: {active} active, {implemented} implemented ({pct(implemented)}), "
            f"{tested} tested ({pct(tested)}; by the weakest test: {split(self.totals())}; "
            f"by the strongest: {split(self.totals(strongest=True))}), {waived} waived, "
            f"{len(self.problems)} problems; per family implemented/tested/active: {families}"
        )


def check_tree(root: Path) -> Result:
    """Read the requirement pages and every citation under `root`, and check them."""
    return check(read_pages(root), scan_tree(root))


def check(catalogue: Catalogue, citations: Iterable[Citation]) -> Result:
    traces = {rid: Trace(req) for rid, req in sorted(catalogue.requirements.items())}
    problems = list(catalogue.problems)
    seen: dict[tuple[str, Path, int, Kind, bool], None] = {}
    ranged: list[tuple[Trace, Citation]] = []
    for citation in citations:
        for rid in _expand(catalogue, citation, problems):
            # A range does not hide an ID the same line also names on its own.
            key = (rid, citation.path, citation.line, citation.kind, citation.last is not None)
            if key in seen:
                continue
            seen[key] = None
            if citation.last is not None and citation.kind in (Kind.CODE, Kind.TEST):
                ranged.append((traces[rid], citation))
            else:
                _record(traces[rid], citation, problems)
    # A range is credited only where the same kind of citation names the ID on its own.
    # A withdrawn ID still goes to `_record`, which rejects a test range that covers it.
    for trace, citation in ranged:
        if _individually(trace, citation.kind) or trace.requirement.status is Status.WITHDRAWN:
            _record(trace, citation, problems)
    return Result(traces, tuple(dict.fromkeys(problems)))


def _individually(trace: Trace, kind: Kind) -> bool:
    return bool(trace.code if kind is Kind.CODE else trace.tests)


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
        _check_by(citation, problems)
        trace.tests.append(citation)


def _check_by(citation: Citation, problems: list[Problem]) -> None:
    """A marker's `by=` names a kind, and no more than its tests use."""
    declared, derived = citation.declared, citation.verified or Verified.DEFINITION
    if declared is None:
        return
    if declared not in set(Verified):
        kinds = ", ".join(f'"{v}"' for v in Verified)
        problems.append(
            Problem(citation.path, citation.line, f"by={declared!r} is not one of {kinds}")
        )
    elif Verified(declared).rank > derived.rank:
        problems.append(
            Problem(
                citation.path,
                citation.line,
                f'by="{declared}" says more than its tests use ({derived}; see verification.py)',
            )
        )


def by_family(result: Result) -> dict[str, list[Trace]]:
    grouped: dict[str, list[Trace]] = defaultdict(list)
    for trace in result.traces.values():
        grouped[trace.requirement.family].append(trace)
    return grouped
