"""The chain runner both controllers share, and the step list the docs render from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from batteryop.kube.chain import Scope, run_chain
from batteryop.operator.claims import reconcile as claims
from batteryop.operator.docs_hook import on_page_markdown, read_steps, steps_table
from batteryop.operator.pools import reconcile as pools


@dataclass
class Trace(Scope):
    ran: list[str] = field(default_factory=list)


def step(name: str, *, stops: bool = False):  # type: ignore[no-untyped-def]
    async def run(scope: Trace) -> None:
        scope.ran.append(name)
        if stops:
            scope.stopped = True

    run.__name__ = name
    return run


async def test_the_chain_runs_until_a_step_stops_it_and_the_last_steps_always() -> None:
    scope = Trace()
    await run_chain(scope, [step("a"), step("b", stops=True), step("c")], [step("x"), step("y")])
    assert scope.ran == ["a", "b", "x", "y"]
    done = Trace()
    await run_chain(done, [step("a"), step("c")], [step("x")])
    assert done.ran == ["a", "c", "x"]


async def test_a_scope_stopped_before_the_chain_runs_only_the_last_steps() -> None:
    scope = Trace(stopped=True)
    await run_chain(scope, [step("a")], [step("x")])
    assert scope.ran == ["x"]


def test_the_docs_read_exactly_the_steps_the_reconciles_run() -> None:
    # The hook reads the source; the reconciles run the imported tuples: the same steps, in
    # the same order, for both controllers.
    for controller, module in (("claims", claims), ("pools", pools)):
        read = read_steps(controller)
        for key in ("CHAIN", "LAST"):
            ran = [(f.__module__, f.__name__) for f in getattr(module, key)]
            assert [(d.module, d.function) for d in read[key]] == ran, (controller, key)


def test_every_step_module_opens_with_its_own_summary_and_no_step_number() -> None:
    # The order lives in the tuples; a number in a module's docstring would be a second copy
    # that drifts (it did: the Pool modules' numbers disagreed with the code).
    for controller in ("claims", "pools"):
        for steps in read_steps(controller).values():
            for doc in steps:
                module = doc.module.rsplit(".", 1)[-1]
                assert doc.summary.lower().startswith(module.replace("_", " ")), doc
                assert "Step " not in doc.summary and "\n" not in doc.summary, doc


def test_the_docs_table_lists_the_chain_in_order_then_the_last_steps() -> None:
    table = steps_table("pools").splitlines()
    assert [row.split("|")[2].strip(" `") for row in table[2:]] == [
        "delete.delete_pool",
        "finalizer.ensure_finalizer",
        "declare.declare",
        "status.report",
        "answered.answered",
        "ready_event.ready_event",
    ]
    assert [row.split("|")[1].strip() for row in table[2:]] == [
        "1",
        "2",
        "3",
        "4",
        "always",
        "always",
    ]
    assert "DeletePool" in table[2] or "drained" in table[2]


def test_the_hook_fills_each_marker_and_leaves_other_pages_alone() -> None:
    page = "A\n\n<!-- reconcile-steps: claims -->\n\nB\n\n<!-- reconcile-steps: pools -->\n"
    rendered = on_page_markdown(page)
    assert "<!-- reconcile-steps" not in rendered
    assert "`bind.bind`" in rendered and "`declare.declare`" in rendered
    assert rendered.index("`bind.bind`") < rendered.index("`declare.declare`")
    assert on_page_markdown("no marker here") == "no marker here"
