"""The local stack's steps say what they are doing while they run (issue 49: the README's
first command went quiet for minutes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from batteryop.api.clock import FakeClock
from batteryop.devstack.artifacts import Artifacts
from batteryop.devstack.main import LineProgress
from batteryop.devstack.stack import Stack, left_after
from batteryop.devstack.state import StateDir
from batteryop.testing.polling import wait_until


async def test_a_step_that_runs_long_says_how_long_and_what_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    stack = Stack(
        StateDir(tmp_path / "state"),
        tmp_path / "logs",
        Artifacts({}, tmp_path / "client.whl"),
        progress=LineProgress(),
        clock=clock,
    )
    ready = asyncio.Event()

    async def start_battery() -> str:
        await ready.wait()
        return "started"

    async def lines() -> list[str]:
        return capsys.readouterr().out.splitlines()

    step = asyncio.create_task(stack._step("battery", start_battery))

    async def waiting() -> int:
        return clock.sleepers

    await wait_until(waiting, lambda n: n == 1, what="the step's heartbeat", interval=0.01)
    clock.advance(15)
    said = await wait_until(lines, bool, what="a line about the running step", interval=0.01)
    left = "host-registry, operator, Host reports ready, Hosts in battery"  # after battery
    assert said == [f"  busy   battery: 15 s; then {left}"]
    clock.advance(5)
    ready.set()
    assert await step == "started"
    assert (await lines()) == ["  ready  battery                           20.00 s"]
    assert stack.timings["battery"] == 20.0


def test_a_step_says_what_is_left_after_it_in_the_stacks_order() -> None:
    assert left_after("guest image").startswith("oci-registry, guest images pushed, control plane,")
    assert left_after("Host reports ready") == "Hosts in battery"
    assert left_after("Hosts in battery") == ""
    assert left_after("client venv") == "", "beside the steps, not one of them"
