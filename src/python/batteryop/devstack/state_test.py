from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from batteryop.devstack.state import Recorded, StackRunningError, StateDir, start_time

SUPERVISOR = """
import shutil, signal, sys, time
def stop(*_):
    shutil.rmtree(sys.argv[1])
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def write_state(state: StateDir, pid: int) -> None:
    state.path.mkdir(parents=True, exist_ok=True)
    state.state_file.write_text(json.dumps({"pid": pid, "started": start_time(pid)}))


@pytest.mark.req("TD-111")
def test_a_start_kills_what_a_crashed_run_left_and_removes_its_files(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    state = StateDir(tmp_path / "state")
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_state(state, gone.pid)  # the crashed supervisor
    state.record("flintlockd-host-a", sleeper.pid)
    (state.path / "etcd").mkdir()

    cleaned = state.claim()

    assert cleaned == [f"killed flintlockd-host-a (pid {sleeper.pid}) left by an earlier run"]
    assert sleeper.wait(timeout=10) != 0
    assert not (state.path / "etcd").exists()
    assert state.supervisor() == Recorded("supervisor", os.getpid(), start_time(os.getpid()) or "")


@pytest.mark.req("TD-111")
def test_a_start_refuses_while_another_stack_runs_from_the_directory(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    state = StateDir(tmp_path / "state")
    write_state(state, sleeper.pid)
    with pytest.raises(StackRunningError, match=f"pid {sleeper.pid}"):
        state.claim()
    assert sleeper.poll() is None


@pytest.mark.req("TD-111")
def test_down_stops_the_running_stack_which_removes_its_directory(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    state.path.mkdir()
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(state.path)], stdout=subprocess.PIPE
    )
    assert supervisor.stdout is not None
    assert supervisor.stdout.readline() == b"ready\n"
    write_state(state, supervisor.pid)

    assert state.down(timeout=30) == f"stopped the stack (pid {supervisor.pid})"
    assert supervisor.wait(timeout=10) == 0
    assert not state.path.exists()


@pytest.mark.req("TD-111")
def test_down_with_nothing_running_removes_what_is_left(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    assert state.down() == "no stack is running"
    state.path.mkdir()
    (state.path / "kubeconfig").write_text("x")
    assert "removed what one left" in state.down()
    assert not state.path.exists()


@pytest.mark.req("TD-111")
def test_a_pid_given_to_another_process_is_never_signalled() -> None:
    me = Recorded("x", os.getpid(), "1")  # this pid, but another start time
    assert not me.alive()
    me.kill()  # signals nothing: this test is still running
