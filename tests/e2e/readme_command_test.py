"""The README's first command, run exactly as written in a terminal, and stopped as a person
stops it: Ctrl-C, Ctrl-C twice, or SIGTERM. Each time every process ends and nothing is left
but the log folder.

The sandbox Pants gives this test holds a copy of the repository (`//:whole-repository`, under
`repository/`), where the command runs as in a fresh clone: `./pants` with a pantsd of its own, which builds the
pexes and runs the stack as `pants run` does for a user. It runs in a pseudo-terminal whose
foreground process group is the command, as a shell's job is: Ctrl-C is the byte 0x03 typed
into the terminal, and the terminal driver sends SIGINT to that group; nothing here signals the
stack's own processes. Pants forwards the interrupt to the process it runs and kills it a while
later; the stack's reaper (`batteryop.devstack.reaper`) covers what that kill cuts short.

TMPDIR is a folder of the test's own, so the stack's default state directory (under it) never
meets a stack a developer runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from batteryop.devstack.state import DEFAULT_STATE_DIR, Recorded, StateDir
from batteryop.testing.terminal import Terminal

UP_TIMEOUT = 600.0  # the first start builds every pex (from Pants' cache after the first time)
STOP_TIMEOUT = 120.0
RUNNING = "devstack: running; Ctrl-C stops"
CTRL_C = b"\x03"


def readme_main_command() -> str:
    text = Path("repository/README.md").read_text()
    block = re.search(r"## Setup: two commands\s+```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no 'Setup: two commands' bash block"
    return next(line.strip() for line in block.group(1).splitlines() if line.strip())


async def ended(pid: int, timeout: float) -> None:
    """Wait until process `pid` has ended (its pidfd turns readable), at most `timeout`."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, done.set)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@pytest.fixture(scope="module")
def repository() -> Iterator[Path]:
    """The copy of the repository; its pantsd is stopped when the module ends."""
    root = Path("repository").resolve()
    assert (root / "pants").is_file() and (root / "pants.toml").is_file(), "not a repository copy"
    # A clone has a commit: the release targets take their version from it.
    git = ["git", "-c", "user.name=readme-test", "-c", "user.email=readme-test@localhost"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the sandbox's copy"]):
        subprocess.run([*git, *step], cwd=root, check=True, capture_output=True)
    try:
        yield root
    finally:
        for pid_file in root.glob(".pids/*/pantsd/pid"):
            with contextlib.suppress(ValueError, OSError):
                pid = int(pid_file.read_text().strip())
                fd = os.pidfd_open(pid)
                os.kill(pid, signal.SIGTERM)
                select.select([fd], [], [], 30)  # readable once it has ended
                os.close(fd)


class Run:
    """One run of the README's first command with a TMPDIR of its own."""

    def __init__(self, repository: Path, tmp: Path) -> None:
        self.tmp = tmp
        self.tmp.mkdir()
        env = dict(os.environ)
        for key in [k for k in env if k.startswith("PEX") or k in ("PYTHONPATH", "VIRTUAL_ENV")]:
            del env[key]
        env.update(TMPDIR=str(tmp), TERM="xterm-256color", COLUMNS="160", LINES="50")
        self.state = StateDir(tmp / DEFAULT_STATE_DIR.name)
        self.logs_before = set((repository / ".devstack/logs").glob("*"))
        self.repository = repository
        self.terminal = Terminal(readme_main_command(), env, cwd=repository)
        self.processes: list[Recorded] = []
        self.reaper: int | None = None

    async def until_running(self) -> None:
        await self.terminal.wait_for(RUNNING, UP_TIMEOUT)
        self.processes = list(self.state.recorded())
        data = self.state.read() or {}
        self.reaper = data.get("reaper")
        names = {p.name for p in self.processes}
        assert names >= {"operator", "battery", "csr-approver", "host-registry"}, names
        assert all(p.alive() for p in self.processes)
        assert isinstance(self.reaper, int)

    async def assert_nothing_left(self) -> Path:
        """After the command ended: every process and the reaper gone, the state directory
        gone; returns the log folder, which stays."""
        code = await self.terminal.exited(STOP_TIMEOUT)
        assert self.reaper is not None
        await ended(self.reaper, STOP_TIMEOUT)  # the reaper ends last, once all is clean
        assert not [p for p in self.processes if p.alive()], "every process stopped"
        assert not self.state.path.exists(), sorted(map(str, self.state.path.rglob("*")))[:20]
        left = [p.name for p in self.tmp.iterdir() if "devstack" in p.name or "batteryop" in p.name]
        assert left == [], f"left in TMPDIR: {left}"
        logs = set((self.repository / ".devstack/logs").glob("*")) - self.logs_before
        assert len(logs) == 1, (logs, code, self.terminal.text[-3000:])
        (log_dir,) = logs
        names = {p.name for p in log_dir.iterdir()}
        assert {"operator.log", "battery.log", "kube-apiserver.log"} <= names, names
        return log_dir


@pytest.mark.req("TD-110", "TD-111")
async def test_ctrl_c_in_a_terminal_stops_the_readme_command_and_leaves_only_logs(
    repository: Path, tmp_path: Path
) -> None:
    run = Run(repository, tmp_path / "tmp")
    try:
        await run.until_running()
        assert "demo: $ battery exec" in run.terminal.text, run.terminal.text[-3000:]
        run.terminal.type(CTRL_C)
        await run.assert_nothing_left()
        assert "devstack: stopped and cleaned up" in run.terminal.text, run.terminal.text[-3000:]
    finally:
        run.terminal.close()


@pytest.mark.req("TD-111")
async def test_ctrl_c_twice_stops_the_readme_command_and_leaves_only_logs(
    repository: Path, tmp_path: Path
) -> None:
    run = Run(repository, tmp_path / "tmp")
    try:
        await run.until_running()
        run.terminal.type(CTRL_C)
        run.terminal.type(CTRL_C)  # impatient: again while it stops
        await run.assert_nothing_left()
    finally:
        run.terminal.close()


@pytest.mark.req("TD-111")
async def test_sigterm_stops_the_readme_command_and_leaves_only_logs(
    repository: Path, tmp_path: Path
) -> None:
    run = Run(repository, tmp_path / "tmp")
    try:
        await run.until_running()
        run.terminal.popen.send_signal(signal.SIGTERM)  # `kill <pid>` of the command
        await run.assert_nothing_left()
    finally:
        run.terminal.close()
