"""The stack's command as a user runs it: a crash (kill -9 of the stack and its reaper) is cleaned
up by the next start, and SIGINT stops every process and leaves nothing but the log folder.
(readme_command_test runs the README's command through Pants in a terminal.)

The command runs with its own TMPDIR, so whatever it or its processes put into a temporary
directory is seen here too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from batteryop.devstack.state import Recorded, StateDir

PEX = Path("src.python.batteryop.devstack/devstack-pex.pex")
UP_TIMEOUT = 240.0


async def start(state: Path, logs: Path, tmp: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEX") and k != "PYTHONPATH"}
    env["TMPDIR"] = str(tmp)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEX),
        "--artifacts=.",
        "--no-demo",
        "--hosts=1",
        f"--state-dir={state}",
        f"--log-dir={logs}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )


async def read_until(process: asyncio.subprocess.Process, marker: str) -> list[str]:
    """Its output lines up to and including the first holding `marker`."""
    assert process.stdout is not None
    lines: list[str] = []

    async def read() -> None:
        while True:
            raw = await process.stdout.readline()  # type: ignore[union-attr]
            assert raw, f"exited with {await process.wait()} before {marker!r}:\n" + "".join(lines)
            lines.append(raw.decode())
            if marker in lines[-1]:
                return

    try:
        await asyncio.wait_for(read(), UP_TIMEOUT)
    except TimeoutError:
        raise AssertionError(f"no {marker!r} in {UP_TIMEOUT:.0f}s:\n" + "".join(lines)) from None
    return lines


@pytest.mark.req("TD-110", "TD-111")
async def test_a_crashed_stack_is_cleaned_up_by_the_next_start_and_ctrl_c_leaves_only_logs(
    tmp_path: Path,
) -> None:
    state, tmp = tmp_path / "state", tmp_path / "tmp"
    tmp.mkdir()
    first = await start(state, tmp_path / "logs-1", tmp)
    await read_until(first, "devstack: up in")
    left = list(StateDir(state).recorded())
    assert {r.name for r in left} >= {"operator", "battery", "csr-approver", "host-registry"}, left
    reaper = (StateDir(state).read() or {}).get("reaper")
    assert isinstance(reaper, int), "the stack records its reaper"
    # kill -9 of the stack and of its reaper (a stack alone killed is cleaned up by its reaper:
    # reaper_test): nothing of it gets to clean up.
    os.kill(reaper, signal.SIGKILL)
    first.kill()
    await first.wait()
    assert any(r.alive() for r in left), "kill -9 should leave its processes running"

    second = await start(state, tmp_path / "logs-2", tmp)
    lines = await read_until(second, "devstack: up in")
    assert any("left by an earlier run" in line for line in lines), "".join(lines)
    assert not [r for r in left if r.alive()], "the second start killed what the first left"
    running: list[Recorded] = list(StateDir(state).recorded())
    assert running and all(r.alive() for r in running)

    second.send_signal(signal.SIGINT)  # Ctrl-C
    rest, _ = await asyncio.wait_for(second.communicate(), 60)
    assert second.returncode == 0, rest.decode()
    assert "stopped and cleaned up" in rest.decode()
    assert not [r for r in running if r.alive()], "every process stopped"
    assert not state.exists(), list(state.rglob("*"))
    assert list(tmp.iterdir()) == [], "nothing left in its temporary directory"
    logs = {p.name for p in (tmp_path / "logs-2").iterdir()}
    want = {"operator.log", "battery.log", "host-registry.log", "kube-apiserver.log", "etcd.log"}
    assert want <= logs, logs
