"""An mkdocs hook (`hooks:` in mkdocs.yml): `docs/operator.md` lists both controllers' steps
from the tuples the reconciles run (`CHAIN` and `LAST` in `claims/reconcile.py` and
`pools/reconcile.py`), so the published order is the order the code runs.

The page holds a marker, `<!-- reconcile-steps: claims -->` or `... pools -->`, where the
table goes. The hook reads the source (Python's `ast`), not the imported modules, so the
site builds with mkdocs alone: no generated protobuf code, no gRPC, no Kubernetes client.
`chain_test.py` checks that what it reads is what the imported tuples hold.

`<!-- reconcile-diagram: claims -->` becomes a ```` ```dot claim-life ```` block: the claim's
life drawn from the same tuples (`docs_diagram.py`), which `batteryop.figures`' hook, listed
after this one, draws as SVG.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1]  # src/python
MARKER = re.compile(r"<!-- reconcile-steps: (claims|pools) -->")
DIAGRAM = re.compile(r"<!-- reconcile-diagram: claims -->")


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


def _summary(module: str) -> str:
    path = SRC.joinpath(*module.split(".")).with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def read_steps(controller: str) -> dict[str, list[StepDoc]]:
    """`CHAIN` and `LAST` of `<controller>/reconcile.py`, each step with its module's summary."""
    tree = ast.parse((HERE / controller / "reconcile.py").read_text())
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


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = MARKER.sub(lambda m: steps_table(m.group(1)), markdown)
    return DIAGRAM.sub(lambda _m: f"```dot claim-life\n{_claim_life_dot()}```\n", markdown)


def _claim_life_dot() -> str:
    # The diagram module reads the same tuples through this module; imported here, where the
    # package is importable (mkdocs loads this file by its path).
    sys.path.insert(0, str(SRC))
    from batteryop.operator.docs_diagram import claim_life_dot

    return claim_life_dot()
