"""A claim's life as the operator runs it, drawn for `docs/operator.md` from the code.

The steps and their order come from `CHAIN` and `LAST` of `claims/reconcile.py`, read by
`steps.read_steps` (the same reading as the steps table). What each step does is read
from its module's source (Python's `ast`) and from each function it imports from another module
of its controller (`bind` reaches `ClaimVM` through `cordoned`, `renew` expires a claim through `expiry.expire`);
a step that runs other steps says so (`after_bind` runs `agent` and `host_ready`):

- the battery calls it makes: calls of a `BatteryClient` method (`claim_vm` is `ClaimVM`);
- the phases it may set (`phase=ClaimPhase.*`), the conditions and reasons its code names
  (`ClaimConditionType.*`, `ClaimReason.*`) and the Events it may post (`EventReason.*`);
- the finalizer it adds or removes (`outcome.add_finalizer`, `outcome.remove_finalizer`).

The diagram is Graphviz `dot` source; `batteryop.figures` draws it when the site is built.
`claim_life_test.py` checks what it reads against the code's behaviour.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from typing import Final

from batteryop.api import conditions
from batteryop.docsite.steps import CONTROLLERS, SRC, StepDoc, module_path, read_steps

_ENUMS = ("ClaimConditionType", "ClaimReason", "EventReason")
_NOT_SCAFFOLDING = {"scope", "deps"}
_PHASES = ("Pending", "Bound", "Expired")
ROW_CHARS: Final = 44
"""The longest line of a step's box: a longer list goes on more lines, so the diagram is read
at a page's width (the steps name up to eight reasons)."""


@dataclass(frozen=True)
class StepEffects:
    """What one step may do, read from its source."""

    doc: StepDoc
    battery_calls: tuple[str, ...]
    """gRPC method names, in the order first seen (`ClaimVM`, `ReleaseVM`, ...)."""
    phases: tuple[str, ...]
    conditions: tuple[str, ...]
    reasons: tuple[str, ...]
    events: tuple[str, ...]
    finalizer: tuple[str, ...]
    """`add` and/or `remove`."""
    runs: tuple[str, ...]
    """Other steps it runs itself (`after_bind` runs `agent` and `host_ready`)."""


def battery_methods() -> dict[str, str]:
    """`BatteryClient`'s public async methods, each with its gRPC name (`claim_vm`: `ClaimVM`)."""
    tree = ast.parse((SRC / "batteryop" / "battery" / "client.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BatteryClient")
    return {
        fn.name: "".join("VM" if p == "vm" else p.capitalize() for p in fn.name.split("_"))
        for fn in cls.body
        if isinstance(fn, ast.AsyncFunctionDef) and not fn.name.startswith("_")
    }


def _scanned(doc: StepDoc, controller: str) -> tuple[list[ast.AST], tuple[str, ...]]:
    """What to read for the step `doc`: its module, and each function it imports from another
    module of its controller (not its scope or deps); and the steps it runs itself."""
    package = CONTROLLERS[controller].rpartition(".")[0]
    steps = {
        (s.module, s.function): s.name for group in read_steps(controller).values() for s in group
    }
    tree = ast.parse(module_path(doc.module).read_text())
    nodes: list[ast.AST] = [tree]
    runs: list[str] = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module):
            continue
        parent, _, last = node.module.rpartition(".")
        if parent != package or last in _NOT_SCAFFOLDING:
            continue
        wanted = {alias.name for alias in node.names}
        runs += [steps[(node.module, n)] for n in sorted(wanted) if (node.module, n) in steps]
        imported = ast.parse(module_path(node.module).read_text())
        nodes += [
            fn
            for fn in imported.body
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            and fn.name in wanted
            and (node.module, fn.name) not in steps
        ]
    return nodes, tuple(runs)


def effects(doc: StepDoc, controller: str = "claims") -> StepEffects:
    """What the step `doc` may do, read from its source."""
    methods = battery_methods()
    seen: dict[str, list[str]] = {e: [] for e in _ENUMS}
    phases: list[str] = []
    calls: list[str] = []
    finalizer: list[str] = []
    trees, runs = _scanned(doc, controller)
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id in seen:
                    seen[node.value.id].append(node.attr)
                if node.attr in ("add_finalizer", "remove_finalizer"):
                    finalizer.append(node.attr.split("_")[0])
            if (
                isinstance(node, ast.keyword)
                and node.arg == "phase"
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "ClaimPhase"
            ):
                phases.append(str(conditions.ClaimPhase[node.value.attr]))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods
            ):
                calls.append(methods[node.func.attr])

    def values(enum: str) -> tuple[str, ...]:
        cls = getattr(conditions, enum)
        return tuple(dict.fromkeys(str(cls[name]) for name in seen[enum]))

    return StepEffects(
        doc=doc,
        battery_calls=tuple(dict.fromkeys(calls)),
        phases=tuple(dict.fromkeys(phases)),
        conditions=values("ClaimConditionType"),
        reasons=values("ClaimReason"),
        events=values("EventReason"),
        finalizer=tuple(dict.fromkeys(finalizer)),
        runs=runs,
    )


def _label(n: str, fx: StepEffects) -> str:
    rows = [f'<TR><TD ALIGN="LEFT"><B>{n} {fx.doc.name}</B></TD></TR>']

    def row(title: str, items: tuple[str, ...]) -> None:
        for line in textwrap.wrap(f"{title}: {', '.join(items)}" if items else "", ROW_CHARS):
            rows.append(f'<TR><TD ALIGN="LEFT">{line}</TD></TR>')

    row("runs", fx.runs)
    row("battery", fx.battery_calls)
    row("finalizer", fx.finalizer)
    row("conditions", fx.conditions)
    row("reasons", fx.reasons)
    row("Events", fx.events)
    return f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">{"".join(rows)}</TABLE>>'


def claim_life_dot() -> str:
    """The claim's life: the chain of steps, in order, and the phases each step may set."""
    steps = read_steps("claims")
    order = [("CHAIN", f"{n}.", doc) for n, doc in enumerate(steps["CHAIN"], start=1)] + [
        ("LAST", "always:", doc) for doc in steps["LAST"]
    ]
    fxs = [effects(doc) for _, _, doc in order]
    lines = [
        "digraph claim_life {",
        "  newrank=true; nodesep=0.35; ranksep=0.22;",
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#3f51b5"];',
        '  edge [color="#555555"];',
        '  created [shape=oval, fillcolor="#ffffff", label="claim created\\n(kubectl, the client)"];',
        '  deleted [shape=oval, fillcolor="#ffffff", label="claim gone\\n(finalizer removed)"];',
        '  subgraph cluster_chain { style="rounded"; color="#3f51b5";',
        '    label="one reconcile (claims/reconcile.py): CHAIN in order until a step stops it";',
    ]
    for i, ((key, prefix, _), fx) in enumerate(zip(order, fxs, strict=False)):
        colour = "" if key == "CHAIN" else ', fillcolor="#eaf6ec", color="#2e7d32"'
        lines.append(f"    s{i} [label={_label(prefix, fx)}{colour}];")
        if key == "CHAIN" and order[i + 1][0] == "LAST":
            lines.append("  }")
    lines.append("  created -> s0;")
    for i in range(len(order) - 1):
        after = order[i][0] == "CHAIN" and order[i + 1][0] == "LAST"
        style = ' [style=bold, color="#2e7d32", label=" then, always"]' if after else ""
        lines.append(f"  s{i} -> s{i + 1}{style};")
    placed: set[str] = set()
    for i, fx in enumerate(fxs):
        for phase in fx.phases:
            if phase not in placed:  # beside the first step that sets it
                placed.add(phase)
                lines.append(
                    f'  phase_{phase} [label="phase {phase}", shape=oval,'
                    ' fillcolor="#fff4e0", color="#e08a00"];'
                )
                lines.append(f"  {{ rank=same; s{i}; phase_{phase}; }}")
            lines.append(f'  s{i} -> phase_{phase} [style=dashed, color="#e08a00"];')
        if "remove" in fx.finalizer:
            lines.append(f"  {{ rank=same; s{i}; deleted; }}")
            lines.append(f"  s{i} -> deleted [style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"
