"""Where the repository cites requirement IDs, and how.

Kinds of citation:

- `CODE`: a comment or docstring in source code, or a `#` comment in YAML, shell, BUILD files
  and Containerfiles, outside the tests. It says the behaviour is implemented there.
- `TEST`: a `@pytest.mark.req("CL-002", ...)` marker (or `pytestmark = pytest.mark.req(...)`).
  It says the test exercises the behaviour.
- `MENTION`: a comment or docstring in a test, or prose in the docs and README. It must name a
  defined ID, but counts for neither side. A citation that negates its ID is a mention too,
  wherever it is: `no`, `not` or `without` (any case) then whitespace right before the ID or
  range ("there are no migrations (no BA-109)" says BA-109 is *not* here).
- `WAIVER`: `waive(HI-009): <reason>` in any comment: we deliberately neither build nor test
  that requirement here, and say why.
- `PLANNED`: `planned(EA-040)` (or a range inside the parentheses) in a comment or docstring
  that says what is not built yet. It counts for neither side; the report shows it.

Ranges (`CL-050..CL-053`, `CL-050..053`, `CL-050 to CL-053`, and with an en or em dash between
the ends) stand for every defined ID between their ends; the ends themselves must be defined.
A range is no evidence on its own: `check` credits a code or test range only to the IDs that
a citation of the same kind also names individually (so a range never changes a count), while
`planned(...)` ranges mark every ID in them as planned.

Only comments, docstrings and markers are read in Python files; an ID inside an ordinary string
literal (a test's sample input, say) is data, not a citation. Two folders are not read at all:
the requirement pages (they define, not cite) and this package (its docs show the syntax).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from batteryop.traceability.documents import ID_PATTERN, REQUIREMENTS_DIR
from batteryop.traceability.verification import (
    Marked,
    Verified,
    Verifier,
    in_artifact,
    unpinned_artifacts,
)

THIS_PACKAGE = Path("src/python/batteryop/traceability")

# Folders never read: build output, caches, vendored third-party trees, VCS data.
_SKIP_DIRS = {
    ".git",
    ".pants.d",
    ".cache",
    ".devstack",
    "__pycache__",
    "3rdparty",
    "dist",
    "site",
    "node_modules",
}
# Files whose `#` comments are read (besides Python and Markdown).
_HASH_COMMENT_SUFFIXES = {
    ".yaml",
    ".yml",
    ".sh",
    ".toml",
    ".conf",
    ".cfg",
    ".service",
    ".nft",
    # The image definitions: systemd path units and presets, env files, SELinux sources,
    # networkd files.
    ".path",
    ".preset",
    ".env",
    ".te",
    ".fc",
    ".network",
}
_HASH_COMMENT_NAMES = {"BUILD", "Containerfile", "Dockerfile", "run", "pants"}

_RANGE = re.compile(
    r"(?P<first>"
    + ID_PATTERN
    + r")\s*(?:\.\.|\u2013|\u2014| to )\s*(?:(?P<fam>[A-Z]{2})-)?(?P<last>\d{3})\b"
)
_ID = re.compile(ID_PATTERN)
_WAIVER = re.compile(r"waive\(\s*(?P<id>[A-Z]{2}-\d{3})\s*\)\s*:?(?P<reason>[^\n]*)")
_PLANNED = re.compile(r"planned\((?P<ids>[^)]*)\)")
_NEGATION = re.compile(r"\b(?:no|not|without)\s+$", re.IGNORECASE)


class Kind(StrEnum):
    CODE = "code"
    TEST = "test"
    MENTION = "mention"
    WAIVER = "waiver"
    PLANNED = "planned"


@dataclass(frozen=True)
class Citation:
    """One ID named at one place. `last` is set when the place names a range.

    A test marker also carries how its tests verify (`verified`, derived by `verification`: the
    weakest among them), their names (`tests`) and the `by=` it declares, if any; a code
    citation says whether its file belongs to an artifact that still holds a `PIN-ME`
    placeholder value (`unpinned`).
    """

    id: str
    path: Path
    line: int
    kind: Kind
    last: str | None = None
    reason: str = ""
    verified: Verified | None = None
    declared: str | None = None
    tests: tuple[str, ...] = ()
    unpinned: bool = False


def is_test_file(path: Path) -> bool:
    """Tests and their helpers: `tests/`, `*_test.py`, `test_*.py`, `conftest.py`."""
    return (
        path.parts[:1] == ("tests",)
        or path.name.endswith("_test.py")
        or path.name.startswith("test_")
        or path.name == "conftest.py"
    )


def scan_tree(root: Path) -> Iterator[Citation]:
    """Every citation in the files under `root` that this module knows how to read."""
    verifier = Verifier(root)
    texts: dict[Path, str] = {}
    for path in sorted(_files(root)):
        try:
            texts[path.relative_to(root)] = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
    artifacts = unpinned_artifacts(texts)
    for rel, text in texts.items():
        yield from scan_text(rel, text, verifier, artifacts)


def scan_text(
    path: Path,
    text: str,
    verifier: Verifier | None = None,
    artifacts: set[Path] | None = None,
) -> Iterator[Citation]:
    """The citations in one file's text, read according to its kind of file. `verifier` finds
    the fixtures and helpers a test uses elsewhere in the tree; without it, only this file.
    `artifacts` are the folders that still hold a `PIN-ME` value; without them, this file's
    own folder if it holds one."""
    test = is_test_file(path)
    prose_kind = Kind.MENTION if test else Kind.CODE
    if path.suffix == ".py":
        found = _python(path, text, prose_kind, verifier or Verifier())
    elif path.suffix == ".md":
        found = _in_text(path, 1, text, Kind.MENTION)
    elif path.suffix in _HASH_COMMENT_SUFFIXES or path.name in _HASH_COMMENT_NAMES:
        found = (
            citation
            for number, line in enumerate(text.splitlines(), start=1)
            if (comment := _hash_comment(line))
            for citation in _in_text(path, number, comment, prose_kind)
        )
    else:
        return
    if artifacts is None:
        artifacts = unpinned_artifacts({path: text})
    unpinned = in_artifact(path, artifacts)
    for citation in found:
        yield (
            replace(citation, unpinned=True)
            if unpinned and citation.kind is Kind.CODE
            else citation
        )


def _files(root: Path) -> Iterator[Path]:
    not_read = {root / REQUIREMENTS_DIR, root / THIS_PACKAGE}
    folders = [root]
    while folders:
        for entry in folders.pop().iterdir():
            if entry.is_file():
                yield entry
            elif not (
                entry.name in _SKIP_DIRS
                or (entry.name.startswith(".") and entry.name != ".ci")
                or entry in not_read
            ):
                folders.append(entry)


def _hash_comment(line: str) -> str:
    stripped = line.lstrip()
    if stripped.startswith("#"):
        return stripped[1:]
    position = line.find(" #")
    return line[position + 2 :] if position >= 0 else ""


def _in_text(path: Path, first_line: int, text: str, kind: Kind) -> Iterator[Citation]:
    """IDs, ranges and waivers in a piece of prose that starts at `first_line`."""
    taken: list[tuple[int, int]] = []

    def line_of(offset: int) -> int:
        return first_line + text.count("\n", 0, offset)

    def kind_at(offset: int) -> Kind:
        """`kind`, or a mention where the words right before say the ID is not there."""
        negated = kind in (Kind.CODE, Kind.TEST) and _NEGATION.search(text, 0, offset)
        return Kind.MENTION if negated else kind

    for match in _WAIVER.finditer(text):
        taken.append(match.span())
        yield Citation(
            match["id"], path, line_of(match.start()), Kind.WAIVER, reason=match["reason"].strip()
        )
    for match in _PLANNED.finditer(text):
        taken.append(match.span())
        yield from _in_text(path, line_of(match.start()), match["ids"], Kind.PLANNED)
    for match in _RANGE.finditer(text):
        if any(a <= match.start() < b for a, b in taken):
            continue
        family = match["first"][:2]
        if match["fam"] is not None and match["fam"] != family:
            continue  # "CL-001 to PO-002" is two IDs, not a range
        taken.append(match.span())
        yield Citation(
            match["first"],
            path,
            line_of(match.start()),
            kind_at(match.start()),
            last=f"{family}-{match['last']}",
        )
    for match in _ID.finditer(text):
        if any(a <= match.start() < b for a, b in taken):
            continue
        yield Citation(match[0], path, line_of(match.start()), kind_at(match.start()))


def _python(path: Path, text: str, prose_kind: Kind, verifier: Verifier) -> Iterator[Citation]:
    try:
        tree = ast.parse(text, str(path))
    except SyntaxError:
        return
    for number, comment in _comments(text):
        yield from _in_text(path, number, comment, prose_kind)
    kinds: dict[ast.Call, Marked] | None = None
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (doc := _docstring(node)):
            yield from _in_text(path, doc[0], doc[1], prose_kind)
        if isinstance(node, ast.Call) and _is_req_marker(node.func):
            if kinds is None:
                kinds = verifier.marker_kinds(path, tree)
            marked = kinds.get(node, Marked(Verified.DEFINITION, ()))
            declared = _by(node)
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found = list(_in_text(path, arg.lineno, arg.value, Kind.TEST))
                    found = found or [Citation(arg.value, path, arg.lineno, Kind.TEST)]
                    yield from (
                        (
                            replace(
                                c,
                                verified=marked.verified,
                                declared=declared,
                                tests=marked.tests,
                            )
                            if c.kind is Kind.TEST
                            else c
                        )
                        for c in found
                    )


def _by(call: ast.Call) -> str | None:
    """The `by=` a marker declares: a constant string, or `?` for anything else."""
    for keyword in call.keywords:
        if keyword.arg == "by":
            value = keyword.value
            return (
                value.value
                if isinstance(value, ast.Constant) and isinstance(value.value, str)
                else "?"
            )
    return None


def _comments(text: str) -> Iterator[tuple[int, str]]:
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string[1:]
    except (tokenize.TokenError, SyntaxError):
        return


def _docstring(
    node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[int, str] | None:
    if not node.body:
        return None
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return first.value.lineno, first.value.value
    return None


def _is_req_marker(func: ast.expr) -> bool:
    """`pytest.mark.req(...)` or `mark.req(...)`."""
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "req"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "mark"
    )
