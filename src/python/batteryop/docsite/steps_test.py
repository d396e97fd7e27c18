"""The step lists the docs render: read from the source, they are the steps the reconciles run."""

from __future__ import annotations

from types import ModuleType

import pytest

from batteryop.docsite.mkdocs_hook import on_page_markdown
from batteryop.docsite.steps import CONTROLLERS, read_steps, steps_table
from batteryop.host_registry.inventory import reconcile as host_registry
from batteryop.operator.claims import reconcile as claims
from batteryop.operator.pools import reconcile as pools

RECONCILES: dict[str, ModuleType] = {
    "claims": claims,
    "pools": pools,
    "host-registry": host_registry,
}


def test_every_chain_the_docs_name_is_a_reconcile_module() -> None:
    assert {name: module.__name__ for name, module in RECONCILES.items()} == CONTROLLERS


@pytest.mark.parametrize("controller", sorted(RECONCILES))
def test_the_docs_read_exactly_the_steps_the_reconcile_runs(controller: str) -> None:
    # The hook reads the source; the reconcile runs the imported tuples: the same steps, in
    # the same order.
    read = read_steps(controller)
    for key in ("CHAIN", "LAST"):
        ran = [(f.__module__, f.__name__) for f in getattr(RECONCILES[controller], key)]
        assert [(d.module, d.function) for d in read[key]] == ran, key


@pytest.mark.parametrize("controller", sorted(RECONCILES))
def test_every_step_module_opens_with_its_own_summary_and_no_step_number(controller: str) -> None:
    # The order lives in the tuples; a number in a module's docstring would be a second copy
    # that drifts (it did: the Pool modules' numbers disagreed with the code).
    for steps in read_steps(controller).values():
        for doc in steps:
            module = doc.module.rsplit(".", 1)[-1]
            assert doc.summary.lower().startswith(module.replace("_", " ")), doc
            assert "Step " not in doc.summary and "\n" not in doc.summary, doc


@pytest.mark.parametrize(
    ("controller", "rows"),
    [
        (
            "pools",
            [
                ("1", "delete.delete_pool"),
                ("2", "finalizer.ensure_finalizer"),
                ("3", "autoscale.autoscale"),
                ("4", "declare.declare"),
                ("5", "status.report"),
                ("always", "answered.answered"),
                ("always", "ready_event.ready_event"),
                ("always", "autoscale.resized_event"),
            ],
        ),
        (
            "host-registry",
            [
                ("1", "listed.listed"),
                ("2", "resume.resume"),
                ("3", "admit.admit"),
                ("4", "check_battery.check_battery"),
                ("5", "settle.settle"),
                ("6", "cordons.cordons"),
                ("7", "apply_with_api.apply_with_api"),
                ("8", "apply_with_restart.apply_with_restart"),
                ("9", "write_back.write_back"),
                ("10", "publish.publish"),
                ("11", "schedule.schedule"),
            ],
        ),
    ],
)
def test_the_docs_table_lists_the_chain_in_order_then_the_last_steps(
    controller: str, rows: list[tuple[str, str]]
) -> None:
    table = steps_table(controller).splitlines()
    assert [(row.split("|")[1].strip(), row.split("|")[2].strip(" `")) for row in table[2:]] == rows


def test_a_step_summary_is_its_modules_first_paragraph() -> None:
    table = steps_table("pools").splitlines()
    assert "DeletePool" in table[2] or "drained" in table[2]
    registry = steps_table("host-registry")
    assert "AddHost" in registry and "IN-105" in registry


def test_the_hook_fills_each_marker_and_leaves_other_pages_alone() -> None:
    page = (
        "A\n\n<!-- reconcile-steps: claims -->\n\nB\n\n<!-- reconcile-steps: pools -->\n"
        "\n<!-- reconcile-steps: host-registry -->\n"
    )
    rendered = on_page_markdown(page)
    assert "<!-- reconcile-steps" not in rendered
    assert "`bind.bind`" in rendered and "`declare.declare`" in rendered
    assert rendered.index("`bind.bind`") < rendered.index("`declare.declare`")
    assert rendered.index("`declare.declare`") < rendered.index("`resume.resume`")
    assert on_page_markdown("no marker here") == "no marker here"


def test_an_unknown_chain_fails_the_build() -> None:
    with pytest.raises(KeyError):
        on_page_markdown("<!-- reconcile-steps: nobody -->")
