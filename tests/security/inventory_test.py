"""The trust model page (docs/security.md) and the security suite agree: every test the page
names exists, and every test of this suite is named on the page (issue 43: "a reader sees the
whole list in one place")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PAGE = Path("docs/security.md")
SUITE = Path("tests/security")
NAMED = re.compile(r"`((?:src|tests)/[\w/]+\.py)::(\w+)`")


def _tests_of(path: Path) -> set[str]:
    """The test functions a module defines at its top level (as pytest collects them here)."""
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def _named() -> list[tuple[str, str]]:
    return NAMED.findall(PAGE.read_text())


def test_every_test_the_page_names_exists() -> None:
    named = _named()
    assert len(named) >= 40, f"the page names only {len(named)} tests"
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not Path(path).is_file() or name not in _tests_of(Path(path))
    ]
    assert missing == [], f"docs/security.md names tests that do not exist: {missing}"


def test_every_attack_of_the_suite_is_on_the_page() -> None:
    named = set(_named())
    suite = {
        (str(path), name)
        for path in sorted(SUITE.glob("*_test.py"))
        if path.name != "inventory_test.py"
        for name in _tests_of(path)
    }
    assert suite, "the security suite holds no test"
    unlisted = sorted(f"{path}::{name}" for path, name in suite - named)
    assert unlisted == [], f"tests of tests/security missing from docs/security.md: {unlisted}"
