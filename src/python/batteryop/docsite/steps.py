"""Each controller's steps as the documentation shows them, read from the code that runs them.

`CONTROLLERS` names each chain the pages can show (`claims`, `pools`, `host-registry`) by
its reconcile module. `read_steps` reads that module's `CHAIN` and `LAST` from the source
(Python's `ast`), not the imported module, so the site builds with mkdocs alone;
`steps_test.py` checks that what it reads is what the imported tuples hold. Each step comes
with the first paragraph of its module's docstring, which opens with the module's name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]  # src/python

CONTROLLERS = {
    "claims": "batteryop.operator.claims.reconcile",
    "pools": "batteryop.operator.pools.reconcile",
    "host-registry": "batteryop.host_registry.inventory.reconcile",
}
"""Each chain the pages show, by the name its marker gives, and the module that runs it."""


@dataclass(frozen=True)
class StepDoc:
    """One step as the documentation shows it."""

    module: str
    """The step's module, dotted from the source root (`batteryop.operator.claims.bind`)."""
    function: str
    summary: str
    """The first paragraph of its module's docstring, on one line."""

    @property
    def name(self) -> str:
        """`module.function`, the module's last part only."""
        return f"{self.module.rsplit('.', 1)[-1]}.{self.function}"

    @property
    def package(self) -> str:
        """The step's controller package (`batteryop.operator.claims`)."""
        return self.module.rpartition(".")[0]


def module_path(module: str) -> Path:
    """The source file of the dotted `module`."""
    return SRC.joinpath(*module.split(".")).with_suffix(".py")


def _summary(module: str) -> str:
    doc = ast.get_docstring(ast.parse(module_path(module).read_text())) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def read_steps(controller: str) -> dict[str, list[StepDoc]]:
    """`CHAIN` and `LAST` of the controller's reconcile module, each step with its module's
    summary. An unknown controller raises KeyError (the site build fails on it)."""
    module = CONTROLLERS[controller]
    tree = ast.parse(module_path(module).read_text())
    imported = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    out: dict[str, list[StepDoc]] = {}
    for node in tree.body:
        if not isinstance(node, ast.AnnAssign | ast.Assign):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if not (isinstance(target, ast.Name) and target.id in ("CHAIN", "LAST")):
            continue
        assert isinstance(node.value, ast.Tuple), f"{controller}: {target.id} is not a tuple"
        names = [elt.id for elt in node.value.elts if isinstance(elt, ast.Name)]
        out[target.id] = [StepDoc(imported[n], n, _summary(imported[n])) for n in names]
    return out


def steps_table(controller: str) -> str:
    """A Markdown table of the steps: the chain numbered, then the ones always run."""
    steps = read_steps(controller)
    rows = ["| | step | what it owns |", "|---|---|---|"]
    for label, key in (("{n}", "CHAIN"), ("always", "LAST")):
        for n, doc in enumerate(steps[key], start=1):
            summary = doc.summary.replace("|", "\\|")
            rows.append(f"| {label.format(n=n)} | `{doc.name}` | {summary} |")
    return "\n".join(rows)
