"""The chain runner every controller shares (the step lists the docs render from it are
checked in `batteryop.docsite.steps_test`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from batteryop.kube.chain import Scope, run_chain


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
