from __future__ import annotations

import os
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from batteryop.devstack.reaper import LOG_NAME
from batteryop.devstack.state import StateDir
from batteryop.testing.processes import module_command

# A stand-in stack: claims the state directory, forks the reaper with the real `reaper.start`,
# starts a process and records it, as `up` does, then prints the reaper's pid and waits to be
# stopped: SIGTERM cleans up (as `up` does), SIGKILL leaves everything to the reaper.
STACK = """
import os, signal, subprocess, sys, time
from pathlib import Path
from batteryop.devstack import reaper
from batteryop.devstack.state import StateDir
state, logs = StateDir(Path(sys.argv[1])), Path(sys.argv[2])
state.claim()
guard = reaper.start(state, logs)
state.write_state(reaper=guard.pid, reaper_started=guard.started)
child = subprocess.Popen(["sleep", "600"], start_new_session=True)
state.record("etcd", child.pid)
(state.path / "kubeconfig").write_text("secret")
def stop(*_):
    os.killpg(child.pid, signal.SIGTERM)
    child.wait()
    state.remove()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print(guard.pid, child.pid, flush=True)
time.sleep(600)
"""


def wait_ended(pid: int, timeout: float = 30.0) -> None:
    """Block until `pid` ends: its pidfd turns readable (no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"pid {pid} still runs after {timeout}s"
    finally:
        os.close(fd)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    argv, env = module_command("batteryop")  # only for its interpreter and sys.path
    process = subprocess.Popen(
        [argv[0], "-c", STACK, str(tmp_path / "state"), str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    reaper_pid, child_pid = map(int, process.stdout.readline().split())
    yield process, reaper_pid, child_pid
    for pid in (process.pid, reaper_pid, child_pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


@pytest.mark.req("TD-111")
def test_a_stack_killed_with_sigkill_is_cleaned_up_by_its_reaper(
    tmp_path: Path, stack: tuple[subprocess.Popen[bytes], int, int]
) -> None:
    process, reaper_pid, child_pid = stack
    state = StateDir(tmp_path / "state")
    assert (state.path / "kubeconfig").exists()
    assert os.getsid(reaper_pid) == reaper_pid, "the reaper leads a session of its own"

    process.kill()  # kill -9: the stack gets no chance to clean up
    process.wait()
    wait_ended(reaper_pid)

    wait_ended(child_pid)  # the reaper killed the recorded process...
    assert not state.path.exists()  # ...and removed the state directory
    log = (tmp_path / "logs" / LOG_NAME).read_text()
    assert f"the stack (pid {process.pid}) ended without cleaning up" in log
    assert f"killed etcd (pid {child_pid}) left by the stack (pid {process.pid})" in log


@pytest.mark.req("TD-111")
def test_after_a_clean_stop_the_reaper_ends_and_touches_nothing(
    tmp_path: Path, stack: tuple[subprocess.Popen[bytes], int, int]
) -> None:
    process, reaper_pid, _ = stack
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    wait_ended(reaper_pid)
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "logs" / LOG_NAME).read_text()  # it had nothing to do


@pytest.mark.req("TD-111")
def test_the_reaper_leaves_a_directory_another_stack_now_runs_from(
    tmp_path: Path, stack: tuple[subprocess.Popen[bytes], int, int]
) -> None:
    process, reaper_pid, child_pid = stack
    state = StateDir(tmp_path / "state")
    os.kill(reaper_pid, signal.SIGSTOP)  # hold the reaper while another stack takes over
    process.kill()
    process.wait()
    state.write_state()  # this test process is now the directory's supervisor
    os.kill(reaper_pid, signal.SIGCONT)
    wait_ended(reaper_pid)
    assert state.path.exists() and (state.path / "kubeconfig").exists()
    os.kill(child_pid, 0)  # still running: not the reaper's to kill
