"""Layering rules between packages, checked by walking every import (kopf's import-linter idea).

- `batteryop.api` imports nothing of ours but itself: it is the shared vocabulary (its tests
  may use the harnesses).
- A deployable (operator, host_registry, csr_approver, exec_agent, client) never imports
  another deployable; what two of them share lives in a library package.
- Libraries never import a deployable.
- Only tests (and the harnesses in `batteryop.testing` themselves) import `batteryop.testing`.
- The client wheel never imports kopf.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("src/python/batteryop")
DEPLOYABLES = {"operator", "host_registry", "csr_approver", "exec_agent", "client"}


def modules() -> Iterator[tuple[Path, str, set[str]]]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__")
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
        yield path, name, imported


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "batteryop" else None


def is_test(path: Path) -> bool:
    return path.name.endswith("_test.py") or path.name == "conftest.py"


def violations() -> list[str]:
    found = []
    for path, name, imported in modules():
        mine = package_of(name)
        for target in sorted(imported):
            theirs = package_of(target)
            if target.split(".")[0] == "kopf" and mine == "client":
                found.append(f"{path}: the client wheel imports kopf")
            if theirs is None or theirs == mine:
                continue
            if mine == "api" and not is_test(path):
                found.append(f"{path}: batteryop.api imports {target}")
            if theirs == "testing" and not is_test(path):
                found.append(f"{path}: non-test code imports {target}")
            if theirs in DEPLOYABLES and mine in DEPLOYABLES:
                found.append(f"{path}: deployable {mine} imports deployable {theirs} ({target})")
            if theirs in DEPLOYABLES and mine not in DEPLOYABLES and mine != "testing":
                found.append(f"{path}: library {mine} imports deployable {theirs} ({target})")
    return found


def test_the_walk_sees_the_code() -> None:
    names = {name for _, name, _ in modules()}
    assert "batteryop.tls.pki" in names
    assert "batteryop.testing.controlplane.server" in names


def test_packages_respect_the_layering_rules() -> None:
    assert violations() == []
