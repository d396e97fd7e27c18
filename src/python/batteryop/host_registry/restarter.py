"""The one way battery is restarted (DP-006): signal its process, wait for it to go, wait for
the new one to answer.

The Pod shares one process namespace, so the host registry sees battery's process in `/proc`.
`find_battery` picks the process whose name is the configured one (`poolmgrd`: its `comm`,
the base name of its `argv[0]`, or an argument of its command line, so `python -m <module>`
matches too) *and* whose command line names battery's config file (`-config=<file>`): the
process that reads the file the registry wrote, and no other, even on a machine that runs many.

`Restarter.restart`:
1. the caller has written the config and seen its own mount show it (DP-006, DP-007);
2. SIGTERM to every matching process (normally one);
3. wait until each has exited, on a pidfd (no polling);
4. wait until battery answers again with what it is expected to have (`answered`), up to the
   restart timeout. The kubelet starts the container again (restartPolicy Always); if no
   battery was running, the next one to start reads the new file anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class RestartError(RuntimeError):
    """battery did not go, or did not come back answering as expected, in time."""


@dataclass(frozen=True)
class BatteryProcess:
    pid: int
    argv: tuple[str, ...]


def _matches_name(name: str, comm: str, argv: Sequence[str]) -> bool:
    if comm == name[:15]:  # the kernel keeps 15 characters of the name
        return True
    if argv and os.path.basename(argv[0]) == name:
        return True
    return name in argv[1:]


def _names_file(config_file: str, argv: Sequence[str]) -> bool:
    return any(arg == config_file or arg.endswith("=" + config_file) for arg in argv[1:])


def find_battery(name: str, config_file: str, proc: Path = Path("/proc")) -> list[BatteryProcess]:
    """Processes named `name` whose command line names `config_file`; never this process."""
    found = []
    own = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
        if argv and _matches_name(name, comm, argv) and _names_file(config_file, argv):
            found.append(BatteryProcess(int(entry.name), argv))
    return found


async def wait_exited(pid: int, timeout: float) -> bool:
    """Wait until process `pid` has exited (a pidfd becomes readable); False on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, exited)
    try:
        async with asyncio.timeout(timeout):
            await gone
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class Restarter:
    """Restarts battery through the shared process namespace (DP-006)."""

    def __init__(
        self,
        *,
        process_name: str,
        config_file: str,
        timeout: float,
        proc: Path = Path("/proc"),
    ) -> None:
        self.process_name = process_name
        self.config_file = config_file
        self.timeout = timeout
        self.proc = proc
        self.restarts = 0

    async def restart(self, answered: Callable[[float], Awaitable[None]]) -> float:
        """Signal battery and wait until `answered(remaining_seconds)` returns; the seconds it
        took. `answered` raises if battery does not answer as expected in time."""
        started = time.monotonic()
        processes = find_battery(self.process_name, self.config_file, self.proc)
        if not processes:
            log.warning(
                "Found no battery process; waiting for the next one to start",
                extra={"battery_process": self.process_name, "config_file": self.config_file},
            )
        for p in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
            log.info("Signalled battery", extra={"pid": p.pid, "signal": "SIGTERM"})
        for p in processes:
            remaining = self.timeout - (time.monotonic() - started)
            if not await wait_exited(p.pid, max(0.0, remaining)):
                raise RestartError(f"battery (pid {p.pid}) did not exit within {self.timeout}s")
        remaining = self.timeout - (time.monotonic() - started)
        try:
            await answered(max(0.1, remaining))
        except TimeoutError:
            raise RestartError(
                f"battery did not answer with the new config within {self.timeout}s"
            ) from None
        self.restarts += 1
        return time.monotonic() - started
