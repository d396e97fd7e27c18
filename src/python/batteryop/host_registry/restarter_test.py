from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from batteryop.host_registry.restarter import Restarter, RestartError, find_battery

SLEEP = "import time; time.sleep(120)"


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    ours = subprocess.Popen(
        [sys.executable, "-c", SLEEP, "fake-poolmgrd", f"-config={tmp_path}/a/config.json"]
    )
    other = subprocess.Popen(
        [sys.executable, "-c", SLEEP, "fake-poolmgrd", f"-config={tmp_path}/b/config.json"]
    )
    yield ours, other
    for p in (ours, other):
        p.kill()
        p.wait()


@pytest.mark.req("DP-006")
def test_battery_is_the_named_process_reading_our_config_file(
    tmp_path: Path, sleepers: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]
) -> None:
    ours, other = sleepers
    found = find_battery("fake-poolmgrd", f"{tmp_path}/a/config.json")
    assert [p.pid for p in found] == [ours.pid]
    assert find_battery("poolmgrd", f"{tmp_path}/a/config.json") == []


@pytest.mark.req("DP-006")
async def test_restart_signals_waits_for_the_exit_then_for_battery_to_answer(
    tmp_path: Path, sleepers: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]
) -> None:
    ours, other = sleepers
    restarter = Restarter(
        process_name="fake-poolmgrd", config_file=f"{tmp_path}/a/config.json", timeout=10
    )
    seen: list[int | None] = []

    async def answered(within: float) -> None:
        seen.append(ours.poll())  # battery is asked only once the old process is gone

    await restarter.restart(answered)
    assert seen and seen[0] is not None
    assert other.poll() is None
    assert restarter.restarts == 1


async def test_a_battery_that_never_answers_fails_the_restart(tmp_path: Path) -> None:
    restarter = Restarter(process_name="fake-poolmgrd", config_file=f"{tmp_path}/x", timeout=0.2)

    async def answered(within: float) -> None:
        await asyncio.sleep(within)
        raise TimeoutError

    with pytest.raises(RestartError, match="did not answer"):
        await restarter.restart(answered)
