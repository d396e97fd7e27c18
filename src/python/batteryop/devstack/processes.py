"""The stack's processes: each component is one `Component`, started and watched the same way.

A `Component` is a name, an argv (a deployable's pex and the flags the Manifests give it), its
environment, and the URL that answers 200 once it is ready (`/readyz` of our deployables, the
fakes' control API). `Processes` starts one in its own session with stdout and stderr in
`<log dir>/<name>.log`, records its pid in the state directory, waits for readiness (polling is
the only way to see another process come up), and stops it: SIGTERM to its session, SIGKILL
after a grace period. A process that exits while it should be running fails the wait with the
tail of its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from batteryop.devstack.state import StateDir
from batteryop.testing.processes import file_tail

STOP_GRACE_SECONDS = 10.0
READY_POLL_SECONDS = 0.1


class ComponentError(RuntimeError):
    """A component exited, or did not become ready in time."""

    def __init__(self, name: str, problem: str, log_tail: str = "") -> None:
        detail = f"\n--- last lines of its log:\n{log_tail}" if log_tail else ""
        super().__init__(f"{name}: {problem}{detail}")
        self.name = name


@dataclass(frozen=True)
class Component:
    """One process of the stack."""

    name: str
    argv: tuple[str, ...]
    ready_url: str
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: float = 60.0


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status `url` answers with, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError, http.client.HTTPException):
        return None  # nothing answers, or something that does not speak HTTP/1: not ready


@dataclass
class Running:
    component: Component
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        return file_tail(self.log_path, lines)


class Processes:
    """Every process of one stack, by name, in start order."""

    def __init__(self, state: StateDir, log_dir: Path, base_env: Mapping[str, str]) -> None:
        self.state = state
        self.log_dir = log_dir
        self.base_env = dict(base_env)
        self.running: dict[str, Running] = {}

    def start(self, component: Component) -> Running:
        if component.name in self.running and self.running[component.name].popen.poll() is None:
            raise ComponentError(component.name, "is already running")
        log_path = self.log_dir / f"{component.name}.log"
        env = {**self.base_env, **component.env}
        with log_path.open("ab") as log:
            log.write(f"--- started {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
            log.flush()
            popen = subprocess.Popen(
                list(component.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.state.record(component.name, popen.pid)
        running = Running(component, popen, log_path)
        self.running[component.name] = running
        return running

    async def wait_ready(self, name: str) -> float:
        """Seconds until `name` answered ready (from now)."""
        running = self.running[name]
        component = running.component
        started = time.monotonic()
        deadline = started + component.ready_timeout
        while True:
            code = running.popen.poll()
            if code is not None:
                raise ComponentError(name, f"exited with {code} while starting", running.log_tail())
            if await asyncio.to_thread(http_status, component.ready_url) == 200:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ComponentError(
                    name,
                    f"not ready within {component.ready_timeout:.0f}s ({component.ready_url})",
                    running.log_tail(),
                )
            await asyncio.sleep(READY_POLL_SECONDS)

    def exited(self) -> list[tuple[str, int]]:
        """(name, exit code) of every process that has exited."""
        return [
            (name, code) for name, r in self.running.items() if (code := r.popen.poll()) is not None
        ]

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash: the process dies wherever it is."""
        running = self.running[name]
        if running.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.popen.pid, signal.SIGKILL)
            running.popen.wait(timeout=10)
        self.state.forget(name)

    def stop(self, name: str, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGTERM, then SIGKILL after `grace`; the exit code."""
        running = self.running[name]
        popen = running.popen
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=10)
        # Anything the process left in its session (a pex launcher's child) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        self.state.forget(name)
        return popen.returncode

    def stop_all(self, order: Sequence[str] | None = None) -> None:
        """Stop every process, the last started first, all at once per signal."""
        names = list(order) if order is not None else list(reversed(self.running))
        for name in names:
            popen = self.running[name].popen
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for name in names:
            popen = self.running[name].popen
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
        for name in names:
            self.stop(name, grace=0.1)
