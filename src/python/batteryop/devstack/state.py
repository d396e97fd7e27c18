"""The stack's state directory: one fixed place for everything it makes outside its logs.

    <state>/state.json          the running stack: its supervisor's pid, log folder, API server
    <state>/pids/<name>.pid     one per process it started: "<pid> <start time>"
    <state>/...                 the control plane's data and keys, kubeconfigs, certificates,
                                the client venv, the `env` file

A pid is written with the process's start time (field 22 of /proc/<pid>/stat), so a pid the
kernel has since given to another process is never signalled. `StateDir.claim()` is what a start
does first: it refuses while another stack runs from the same directory, and otherwise removes
what a crashed one left (kills its processes, deletes the directory). `down()` stops a running
stack from another terminal: SIGTERM to its supervisor, which stops everything and removes the
directory; if the supervisor is gone or does not finish in time, it does the same itself.

Requirements: TD-111.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = Path(tempfile.gettempdir()) / f"batteryop-devstack-{os.getuid()}"
"""The fixed state directory (per user), so a second start finds what a first one left."""

STATE_FILE = "state.json"
PID_DIR = "pids"
DOWN_TIMEOUT_SECONDS = 60.0


class StackRunningError(RuntimeError):
    """Another stack runs from this state directory."""


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None when there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def alive(pid: int, started: str) -> bool:
    """Whether `pid` is still the process that started at `started` (and not a zombie)."""
    if start_time(pid) != started:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text()
        return state[state.rindex(")") + 2] != "Z"
    return False


@dataclass(frozen=True)
class Recorded:
    """A process the stack started, as its pid file records it."""

    name: str
    pid: int
    started: str

    def alive(self) -> bool:
        return alive(self.pid, self.started)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process (its whole session: pex launchers and their children too)."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)


@dataclass(frozen=True)
class StateDir:
    path: Path

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @property
    def pid_dir(self) -> Path:
        return self.path / PID_DIR

    # -- the running stack ---------------------------------------------------------------

    def read(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def supervisor(self) -> Recorded | None:
        """The running stack's supervisor, if its state file names one that still runs."""
        data = self.read()
        if not data or not isinstance(data.get("pid"), int):
            return None
        found = Recorded("supervisor", int(data["pid"]), str(data.get("started", "")))
        return found if found.alive() else None

    def write_state(self, **values: Any) -> None:
        pid = os.getpid()
        data = {"pid": pid, "started": start_time(pid), **values}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.state_file)

    # -- processes -----------------------------------------------------------------------

    def record(self, name: str, pid: int) -> None:
        started = start_time(pid)
        if started is not None:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"{name}.pid").write_text(f"{pid} {started}\n")

    def forget(self, name: str) -> None:
        (self.pid_dir / f"{name}.pid").unlink(missing_ok=True)

    def recorded(self) -> Iterator[Recorded]:
        if not self.pid_dir.is_dir():
            return
        for file in sorted(self.pid_dir.glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                pid, started = file.read_text().split()
                yield Recorded(file.stem, int(pid), started)

    # -- start and stop ------------------------------------------------------------------

    def claim(self) -> list[str]:
        """Make the directory this process's: refuse if a stack runs from it, else remove what a
        crashed one left. Returns what was cleaned up (one line each)."""
        running = self.supervisor()
        if running is not None and running.pid != os.getpid():
            raise StackRunningError(
                f"a stack is already running from {self.path} (pid {running.pid}); "
                "stop it first with the `down` command"
            )
        cleaned = self.remove()
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.write_state()
        return cleaned

    def remove(self, left_by: str = "an earlier run") -> list[str]:
        """Kill every recorded process still running and delete the directory. Returns what
        was cleaned up, one line each, naming `left_by` as what left it."""
        cleaned = []
        for proc in self.recorded():
            if proc.alive():
                proc.kill()
                cleaned.append(f"killed {proc.name} (pid {proc.pid}) left by {left_by}")
        if self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)
            if not cleaned:
                cleaned.append(f"removed {self.path} left by {left_by}")
        return cleaned

    def down(self, timeout: float = DOWN_TIMEOUT_SECONDS) -> str:
        """Stop the stack that runs from this directory (see the module docstring)."""
        running = self.supervisor()
        if running is None:
            if not self.path.exists():
                return "no stack is running"
            self.remove()
            return f"no stack was running; removed what one left in {self.path}"
        running.kill(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while running.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if running.alive():
            running.kill(signal.SIGKILL)
            self.remove()
            return f"the stack (pid {running.pid}) did not stop in {timeout:.0f}s; killed it"
        if self.path.exists():
            self.remove()
        return f"stopped the stack (pid {running.pid})"
