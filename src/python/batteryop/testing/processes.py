"""How the harnesses run a Python module of ours as its own process.

`sys.executable -m <module>` with this process's `sys.path` as PYTHONPATH, so the child
imports exactly the code the parent runs (a source tree, a Pants sandbox or a pex alike).
`run_module` is the one lifecycle every fake shares: start it in its own session with stdin
as a lifeline (the fakes exit when it closes, so they die with the test), read the one JSON
readiness line it prints on stdout, and on exit close stdin, SIGTERM, and SIGKILL after a
grace period. Failures carry the tail of the process's log.

The deployables' processes (operator, host registry, CSR approver) answer probes instead:
`http_get` asks one, `wait_until_answers` polls it until it says 200 (a process coming up can
only be asked; there is nothing to watch) or fails with the process's exit and log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from batteryop.api._compat import within

STOP_TIMEOUT_SECONDS = 5.0

log = logging.getLogger(__name__)


def die_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv` run so that the kernel sends it SIGKILL when the thread that started it ends
    (PR_SET_PDEATHSIG), so a crashed test run leaves nothing behind. util-linux's `setpriv`
    sets it and then execs `argv` (the signal survives exec, the pid is argv's). Start the
    result with `start_new_session=True`, so a Ctrl-C to the test's group reaches only the
    test, which stops its children itself.

    This is not a `preexec_fn` on purpose: Python code run between fork and exec in a process
    with gRPC's threads (the fake flintlockd starting QEMU) can kill the child before it
    execs. Measured here: with a preexec_fn that set the same signal, 124 of 500 `true`s
    started under loopback gRPC traffic died of SIGSEGV before exec, and none this way
    (`processes_test`); CI once saw a QEMU "exit" with SIGABRT 2 ms after it was started.
    """
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv]


def spawn_logged(
    argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session, dying with this process (`die_with_parent`), its
    output and errors written to `log`; `env` None: this process's environment."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            die_with_parent(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else dict(env),
        )


def file_tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a process's log file, for an error that says why it failed."""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"(no log: {err})"
    return "\n".join(text.splitlines()[-lines:])


async def stdin_closed() -> None:
    """The child's side of the lifeline: return when stdin (a pipe or socket) reaches its end.

    A stdin that is neither (a terminal, /dev/null) never ends this way: it is ignored, with a
    warning, and this waits forever.
    """
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        log.warning("--exit-on-stdin-eof needs stdin to be a pipe; ignoring it")
        await asyncio.Event().wait()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


def module_command(module: str) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment that run `python -m module` with our sys.path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return [sys.executable, "-m", module], env


@contextlib.asynccontextmanager
async def run_module(
    module: str,
    args: Sequence[str],
    *,
    log_path: Path,
    ready_timeout: float,
    error: Callable[[str], Exception],
) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """Run `python -m module args`, yield (process, its readiness line as a dict), stop it."""
    command, env = module_command(module)
    process: asyncio.subprocess.Process | None = None
    try:
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                *command,
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )
        yield process, await _wait_ready(process, log_path, ready_timeout, error)
    finally:
        if process is not None:
            await stop_process(process)


async def _wait_ready(
    process: asyncio.subprocess.Process,
    log_path: Path,
    seconds: float,
    error: Callable[[str], Exception],
) -> dict[str, Any]:
    assert process.stdout is not None

    def failure(why: str) -> Exception:
        log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
        return error(f"{why}; its log:\n{log}")

    try:
        line = await within(process.stdout.readline(), seconds)
    except TimeoutError:
        raise failure(f"no readiness line within {seconds:.0f}s") from None
    if not line:
        code = await process.wait()
        raise failure(f"exited with {code} before it was ready")
    try:
        ready = json.loads(line)
    except ValueError as err:
        raise failure(f"unexpected readiness line {line!r}: {err}") from None
    if not isinstance(ready, dict):
        raise failure(f"unexpected readiness line {line!r}")
    return ready


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """Close stdin, SIGTERM, and SIGKILL if it has not exited within the grace period."""
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await within(process.wait(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def terminate(popen: subprocess.Popen[bytes], grace: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds; the exit code."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=10)
    return popen.returncode


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """The status and body `url` answers with (an HTTP error's too); OSError when nothing
    answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


async def wait_until_answers(
    popen: subprocess.Popen[bytes],
    url: str,
    timeout: float,
    *,
    what: str,
    logs: Callable[[], str],
    error: type[Exception] = RuntimeError,
) -> None:
    """Until `url` answers 200; `error` naming `what` if the process exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise error(f"{what} exited with {popen.returncode}:\n{logs()[-4000:]}")
        with contextlib.suppress(OSError):
            if (await asyncio.to_thread(http_get, url))[0] == 200:
                return
        await asyncio.sleep(0.1)
    raise error(f"{what}: no answer from {url} in {timeout}s:\n{logs()[-4000:]}")
