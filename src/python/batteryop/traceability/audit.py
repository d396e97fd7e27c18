"""A sample audit: N active requirements drawn at random, each with what the report counts for
it, for a person to check against the code and the tests by hand.

    python -m batteryop.traceability sample 30 --seed 7

prints, per drawn ID, its text and page, where code cites it (`path:line`), and each test
marker citing it with the kind derived for it (`verification`), its `by=` if any and the tests
it marks; then the kind the report gives the ID (weakest and strongest, and its caps). The
seed is printed, so another person can draw the same sample. What a reader finds wrong (an ID
counted as implemented whose code does not do it, a test kind stronger than the test) is a
finding against the report.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from batteryop.traceability.check import LABELS, Result, Trace
from batteryop.traceability.citations import Citation
from batteryop.traceability.documents import Status
from batteryop.traceability.verification import Verified, effective


def draw(result: Result, count: int, seed: int) -> list[Trace]:
    """`count` active requirements (all of them if fewer), drawn with `seed`, in ID order."""
    active = [t for t in result.traces.values() if t.requirement.status is Status.ACTIVE]
    chosen = random.Random(seed).sample(active, min(count, len(active)))
    return sorted(chosen, key=lambda t: t.requirement.id)


def sample(result: Result, count: int, seed: int) -> str:
    """The audit sheet for `count` IDs drawn with `seed`."""
    traces = draw(result, count, seed)
    active = sum(1 for t in result.traces.values() if t.requirement.status is Status.ACTIVE)
    lines = [
        f"{len(traces)} of {active} active requirements, drawn with seed {seed} "
        f"(python -m batteryop.traceability sample {count} --seed {seed})",
    ]
    for trace in traces:
        lines += ["", *_entry(trace)]
    return "\n".join(lines) + "\n"


def _entry(trace: Trace) -> Iterator[str]:
    req = trace.requirement
    yield f"{req.id}{' (ours)' if req.ours else ''} — {req.text}"
    yield f"  defined: {req.page}:{req.line}"
    for planned in trace.planned:
        yield f"  planned: {_at(planned)} (neither implemented nor tested)"
    for waiver in trace.waivers:
        yield f"  waived: {_at(waiver)}: {waiver.reason}"
    by_tests = " (and by its tests: a test double or layer)" if trace.implemented_by_tests else ""
    yield f"  implemented: {'yes' if trace.implemented else 'no'}{by_tests}"
    for citation in trace.code:
        yield f"    code {_at(citation)}" + (" (unpinned artifact)" if citation.unpinned else "")
    verified, strongest = trace.verified, trace.strongest
    if verified is None or strongest is None:
        settled = f" ({len(trace.tests)} citing tests not counted)" if trace.tests else ""
        yield f"  tested: no{settled}"
    else:
        caps = ", ".join(LABELS[c] for c in trace.caps())
        yield (
            f"  tested: weakest {LABELS[verified]}, strongest {LABELS[strongest]}"
            + (f" (capped at {caps})" if caps else "")
        )
    for citation in trace.tests:
        kind = effective(citation.verified or Verified.DEFINITION, citation.declared)
        by = f' by="{citation.declared}"' if citation.declared else ""
        names = ", ".join(citation.tests) or "(no test found)"
        yield f"    test {_at(citation)} {LABELS[kind]}{by}: {names}"


def _at(citation: Citation) -> str:
    return f"{citation.path}:{citation.line}"
