"""The stack's reaper: whatever ends the stack, what it made is stopped and removed.

`up` cleans up after itself on Ctrl-C, SIGTERM and `down`. But a stack can end without getting
to: `./pants run` gives the process it runs a few seconds after Ctrl-C before it kills it
(`process_execution_graceful_shutdown_timeout`), a second Ctrl-C or a closed terminal may do the
same, and `kill -9` or the OOM killer give no time at all. Each of those left the state
directory behind: the control plane's data and keys, kubeconfigs, the client venv.

So the first thing `up` does is fork the reaper: a process in a session of its own (no signal
meant for the terminal's process group reaches it; `start` returns only once it has left the
stack's session), holding the read end of a pipe whose write
end only the stack holds. The kernel closes that end when the stack ends, however it ends; the
reaper reads end-of-file, and if the state directory still names the stack as its supervisor,
it does what `StateDir.remove()` does (kill every recorded process, delete the directory) and
writes one line to the stack's log folder saying so. After a clean stop the directory is gone
and the reaper just exits. It imports nothing after the fork, so it works even once Pants has
deleted the pex it was started from.

If the reaper itself is killed along with the stack, the next `up` still cleans up what both
left (`StateDir.claim()`).

Requirements: TD-111.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
from pathlib import Path

from batteryop.devstack.state import StateDir, start_time

LOG_NAME = "devstack-reaper.log"


class Reaper:
    """The forked reaper, as the stack sees it: its pid, and the pipe end that keeps it waiting."""

    def __init__(self, pid: int, keep_alive: int) -> None:
        self.pid = pid
        self._keep_alive = keep_alive  # never inherited (PEP 446); closed by the kernel at exit

    @property
    def started(self) -> str | None:
        return start_time(self.pid)


def start(state: StateDir, log_dir: Path) -> Reaper:
    """Fork the reaper for the stack that runs from `state` (call before any thread starts)."""
    read_end, write_end = os.pipe()
    detached_r, detached_w = os.pipe()
    stack = os.getpid()
    stack_started = start_time(stack)
    pid = os.fork()
    if pid == 0:  # the reaper
        code = 0
        try:
            os.close(write_end)
            os.close(detached_r)
            _detach(log_dir)
            os.close(detached_w)  # the stack's read below ends: we are out of its session
            while os.read(read_end, 4096):
                pass  # nothing is ever written: end-of-file means the stack has ended
            reap(state, stack, stack_started, log_dir)
        except BaseException:  # a forked child must never return into the stack's code
            code = 1
        finally:
            os._exit(code)
    os.close(read_end)
    # Until the reaper has left the stack's session, a Ctrl-C at the terminal would reach it
    # too: wait for that (its end of this pipe closing), which takes a few milliseconds.
    os.close(detached_w)
    os.read(detached_r, 1)
    os.close(detached_r)
    return Reaper(pid, write_end)


def _detach(log_dir: Path) -> None:
    """Leave the stack's session and terminal: no Ctrl-C, hangup or group signal reaches us."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = os.open(log_dir / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)


def reap(state: StateDir, stack: int, stack_started: str | None, log_dir: Path) -> list[str]:
    """After the stack `stack` ended: remove what it left, if the directory is still its own.

    Returns what was done, one line each (also written to the log folder)."""
    data = state.read()
    ours = (
        data is not None
        and data.get("pid") == stack
        and (stack_started is None or data.get("started") == stack_started)
    )
    if not state.path.exists() or not ours:
        return []  # a clean stop removed it, or another stack runs from it now
    done = state.remove(left_by=f"the stack (pid {stack})")
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = [f"{stamp} the stack (pid {stack}) ended without cleaning up:", *done]
    with contextlib.suppress(OSError):
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / LOG_NAME, "a") as log:
            log.write("\n  ".join(lines) + "\n")
    return lines
