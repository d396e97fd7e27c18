"""The requirement documents under `docs/requirements/`: every ID, where it is defined, its state.

One page per family; each requirement is one bullet whose line starts with its anchor and its
bold ID (`docs/requirements/index.md` describes the form). This module only reads: it turns the
pages into `Requirement` records and reports every line that looks like an entry but breaks the
form, so a typo can never silently drop a requirement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

FAMILIES = ("RS", "CL", "PO", "IN", "EA", "DP", "CC", "TD", "CT", "BA", "HI", "HP", "GI")
"""Every family, in the order of its page number (RS is page 01, GI page 13)."""

REQUIREMENTS_DIR = Path("docs/requirements")

ID_PATTERN = r"\b(?:" + "|".join(FAMILIES) + r")-\d{3}\b"
"""An ID anywhere in text: a known family, a dash, three digits."""

_ENTRY = re.compile(
    r"^- <a id=\"(?P<anchor>[A-Z]{2}-\d{3})\"></a>\*\*(?P<id>[A-Z]{2}-\d{3})\*\*"
    r"(?: \*\((?P<tag>[^)]*)\)\*)? — (?P<text>\S.*)$"
)
_LOOKS_LIKE_ENTRY = re.compile(r"^\s*-\s*(?:<a id=|\*\*" + ID_PATTERN + r"\*\*)")


class Status(StrEnum):
    ACTIVE = "active"
    WITHDRAWN = "withdrawn"


@dataclass(frozen=True)
class Requirement:
    """One requirement as its page defines it."""

    id: str
    page: Path
    line: int
    text: str
    status: Status
    ours: bool

    @property
    def family(self) -> str:
        return self.id[:2]

    @property
    def number(self) -> int:
        return int(self.id[3:])


@dataclass(frozen=True)
class Problem:
    """Something the check rejects, at a place a person can open."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Catalogue:
    """Every requirement by ID, and the problems found while reading the pages."""

    requirements: dict[str, Requirement]
    problems: tuple[Problem, ...]

    def active(self) -> list[Requirement]:
        return [r for r in self.requirements.values() if r.status is Status.ACTIVE]

    def in_range(self, first: str, last: str) -> list[str]:
        """The defined IDs from `first` to `last` inclusive (one family; gaps are skipped)."""
        low, high = int(first[3:]), int(last[3:])
        return sorted(
            r.id
            for r in self.requirements.values()
            if r.family == first[:2] and low <= r.number <= high
        )


def read_pages(root: Path) -> Catalogue:
    """Read every `*.md` page under `<root>/docs/requirements`."""
    pages = sorted((root / REQUIREMENTS_DIR).glob("*.md"))
    return parse_pages((page.relative_to(root), page.read_text()) for page in pages)


def parse_pages(pages: Iterable[tuple[Path, str]]) -> Catalogue:
    requirements: dict[str, Requirement] = {}
    problems: list[Problem] = []
    for path, text in pages:
        fenced = False
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced:
                continue  # an example of the form, not a definition
            match = _ENTRY.match(line)
            if match is None:
                if _LOOKS_LIKE_ENTRY.match(line):
                    problems.append(
                        Problem(
                            path,
                            number,
                            'an entry must read `- <a id="XX-000"></a>**XX-000** — ...`',
                        )
                    )
                continue
            rid = match["id"]
            if match["anchor"] != rid:
                problems.append(Problem(path, number, f"anchor {match['anchor']} names another ID"))
                continue
            if rid[:2] not in FAMILIES:
                problems.append(Problem(path, number, f"{rid}: unknown family {rid[:2]}"))
                continue
            tag = (match["tag"] or "").strip()
            if tag and not (tag == "ours" or tag.startswith("withdrawn")):
                problems.append(Problem(path, number, f"{rid}: unknown tag ({tag})"))
                continue
            if rid in requirements:
                first = requirements[rid]
                problems.append(
                    Problem(
                        path, number, f"{rid} is defined twice (also {first.page}:{first.line})"
                    )
                )
                continue
            requirements[rid] = Requirement(
                id=rid,
                page=path,
                line=number,
                text=match["text"],
                status=Status.WITHDRAWN if tag.startswith("withdrawn") else Status.ACTIVE,
                ours=tag == "ours",
            )
    return Catalogue(requirements, tuple(problems))
