"""The local stack's command: `up` (the default) runs it until interrupted, `down` stops it.

    ./pants run src/python/batteryop/devstack:up               # up: start, demo, run until Ctrl-C
    ./pants run src/python/batteryop/devstack:up -- --hosts 3   # three simulated Hosts
    ./pants run src/python/batteryop/devstack:up -- --hosts 1 --guests qemu   # real guests
    /tmp/batteryop-devstack-$UID/down                          # from another terminal

`up` removes what a crashed earlier run left in the state directory, starts the stack
(`batteryop.devstack.stack`) with a progress display, applies the demo Pool, runs the demo
through the `battery` CLI of the client wheel (`demo`), prints each step's time and how to use
`kubectl` and `battery` against the stack, and waits. Ctrl-C (SIGINT), SIGTERM or `down` stop
every process and remove the state directory; the log folder stays. Should the stack be killed
before it is done (Pants kills what `run` runs a while after Ctrl-C; `kill -9`), its reaper
does the same (`batteryop.devstack.reaper`). Exit codes: 0 after a
clean stop, 1 when the stack or the demo failed (one line naming the cause, and the log
folder), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from batteryop.api._compat import within
from batteryop.devstack import demo, reaper
from batteryop.devstack.artifacts import Artifacts, ArtifactsError
from batteryop.devstack.processes import ComponentError
from batteryop.devstack.stack import Stack
from batteryop.devstack.state import DEFAULT_STATE_DIR, StackRunningError, StateDir
from batteryop.testing.controlplane import ControlPlaneBuildError, ControlPlaneError
from batteryop.testing.progress import Heartbeat

PROG = "devstack"
DEFAULT_LOG_ROOT = Path(".devstack/logs")


class LiveProgress:
    """A table of steps redrawn in place on a terminal (no refresh thread: redrawn on change)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.rows: dict[str, tuple[str, str]] = {}
        self.live = Live(self._table(), console=console, auto_refresh=False, transient=False)

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(width=2)
        table.add_column(no_wrap=True)
        table.add_column(justify="right", no_wrap=True)
        for step, (mark, detail) in self.rows.items():
            table.add_row(mark, step, detail)
        return table

    def _show(self) -> None:
        self.live.update(self._table(), refresh=True)

    def begin(self, step: str, detail: str = "") -> None:
        self.rows[step] = ("[yellow]…[/]", detail or "starting")
        self._show()

    def running(self, step: str, line: str) -> None:
        self.rows[step] = ("[yellow]…[/]", line.removeprefix(f"{step}: ")[:100])
        self._show()

    def done(self, step: str, seconds: float, detail: str = "") -> None:
        self.rows[step] = ("[green]✓[/]", f"{seconds:6.2f} s")
        self._show()

    def failed(self, step: str, detail: str) -> None:
        self.rows[step] = ("[red]✗[/]", detail[:80])
        self._show()


class LineProgress:
    """One line per finished or failed step, and one each time a running step's heartbeat is
    due (not a terminal: a log, a test)."""

    def begin(self, step: str, detail: str = "") -> None:
        pass

    def running(self, step: str, line: str) -> None:
        print(f"  busy   {line}", flush=True)

    def done(self, step: str, seconds: float, detail: str = "") -> None:
        print(f"  ready  {step:<32} {seconds:6.2f} s", flush=True)

    def failed(self, step: str, detail: str) -> None:
        print(f"  FAILED {step:<32} {detail}", flush=True)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("command", nargs="?", choices=["up", "down"], default="up")
    p.add_argument("--hosts", type=int, default=2, help="simulated Hosts (default 2)")
    p.add_argument(
        "--guests",
        choices=["sandbox", "qemu"],
        default="sandbox",
        help="what each MicroVM is: a folder on this machine (default), or a QEMU guest of the "
        "Debian guest image whose guest agent runs every command (about a minute to boot each "
        "under QEMU's emulator, 0.5 GiB of memory)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"where the running stack keeps its files (default {DEFAULT_STATE_DIR})",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        help=f"the log folder (default {DEFAULT_LOG_ROOT}/<UTC time>)",
    )
    p.add_argument(
        "--artifacts",
        type=Path,
        default=Path("dist"),
        help="where the pexes and the client wheel are (`./pants package` writes dist/)",
    )
    p.add_argument(
        "--no-demo", action="store_true", help="start the stack only: no demo, no client venv"
    )
    p.add_argument(
        "--once", action="store_true", help="stop after the demo instead of waiting (a smoke test)"
    )
    args = p.parse_args(argv)
    if not 1 <= args.hosts <= 20:
        p.error("--hosts: must be between 1 and 20")
    return args


def usage(stack: Stack) -> str:
    env = stack.env_file
    return "\n".join(
        [
            f"logs of every process: {stack.log_dir.resolve()}",
            "use it from another terminal:",
            f"  . {env}",
            "  kubectl get pools,microvmclaims -A",
            "  battery run demo -- uname -a",
            "  battery claim demo        # then: battery exec <claim> -- ...; battery release <claim>",
            f"stop it: Ctrl-C here, or run {stack.down_script} from another terminal",
        ]
    )


async def up(args: argparse.Namespace, console: Console) -> int:
    state = StateDir(args.state_dir.resolve())
    try:
        for line in state.claim():
            console.print(f"devstack: {line}")
    except StackRunningError as e:
        console.print(f"devstack: {e}")
        return 1
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = (args.log_dir or DEFAULT_LOG_ROOT / stamp).resolve()
    # Before anything else starts: whatever ends this process, the reaper cleans up after it.
    guard = reaper.start(state, log_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stack: Stack | None = None
    live: LiveProgress | None = None
    try:
        artifacts = Artifacts.find(args.artifacts)
        live = LiveProgress(console) if console.is_terminal else None
        stack = Stack(
            state,
            log_dir,
            artifacts,
            host_count=args.hosts,
            guests=args.guests,
            client_venv=not args.no_demo,
            progress=live or LineProgress(),
        )
        state.write_state(log_dir=str(log_dir), reaper=guard.pid, reaper_started=guard.started)
        console.print(f"devstack: starting; logs in {log_dir}")
        if live is not None:
            live.live.start()
        up_task = asyncio.create_task(stack.up())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([up_task, stopper], return_when=asyncio.FIRST_COMPLETED)
        if live is not None:
            live.live.stop()
        if stop.is_set():
            up_task.cancel()
            with contextlib.suppress(BaseException):
                await up_task
            console.print("devstack: interrupted while starting")
            return 0
        stopper.cancel()
        await up_task
        assert stack.cp is not None
        console.print(
            f"devstack: up in {stack.timings['up']:.1f}s: API server {stack.cp.url}, "
            f"battery {stack.battery_target}, Hosts "
            + ", ".join(f"{n} ({h.files.address})" for n, h in stack.hosts.items())
        )
        if not args.no_demo:
            await run_demo(stack, console)
        console.print(usage(stack))
        if args.once:
            return 0
        console.print("devstack: running; Ctrl-C stops every process and removes its files")
        await watch(stack, stop, console)
        return 0
    except (
        ArtifactsError,
        ComponentError,
        ControlPlaneBuildError,
        ControlPlaneError,
        demo.DemoError,
        TimeoutError,
    ) as e:
        console.print(f"devstack: error: {e}", markup=False)
        console.print(f"devstack: logs in {log_dir}")
        return 1
    finally:
        if live is not None:
            live.live.stop()
        started = time.monotonic()
        if stack is not None:
            stack.down()
        else:
            state.remove()
        console.print(f"devstack: stopped and cleaned up in {time.monotonic() - started:.1f}s")


async def run_demo(stack: Stack, console: Console) -> None:
    async with stack.kube() as kube:
        # The Pool is Ready once its MicroVMs are provisioning; QEMU guests take longer to
        # provision than the battery command's own wait for an available one.
        timeout = demo.QEMU_POOL_TIMEOUT_SECONDS if stack.guests == "qemu" else None
        waited = "Ready with a MicroVM available" if stack.guests == "qemu" else "Ready"
        heartbeat = Heartbeat(
            f"demo: waiting for Pool demo/{demo.POOL} {waited}",
            left="claim, exec, renew and release with the battery command",
            say=lambda line: console.print(line, markup=False),
        )
        seconds = await heartbeat.watch(
            demo.apply_pool(
                kube, available=stack.guests == "qemu", timeout=timeout, images=stack.guest_refs
            )
        )
    console.print(f"demo: Pool demo/{demo.POOL} {waited} in {seconds:.2f}s")
    for step in await demo.run(stack.cli_env()):
        console.print(f"demo: $ {step.command}    [{step.seconds * 1000:.0f} ms]", markup=False)
        for line in (step.stdout + step.stderr).splitlines():
            console.print(f"demo:   {line}", markup=False, highlight=False)


async def watch(stack: Stack, stop: asyncio.Event, console: Console) -> None:
    """Wait for a stop; report a process that exits on its own meanwhile (and keep running)."""
    assert stack.processes is not None
    reported: set[str] = set()
    while not stop.is_set():
        for name, code in stack.processes.exited():
            if name not in reported:
                reported.add(name)
                console.print(f"devstack: {name} exited with {code}; see {name}.log")
        with contextlib.suppress(TimeoutError):
            await within(stop.wait(), 1.0)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    console = Console(highlight=False, soft_wrap=True)
    if args.command == "down":
        console.print(f"devstack: {StateDir(args.state_dir.resolve()).down()}")
        return 0
    return asyncio.run(up(args, console))


if __name__ == "__main__":
    sys.exit(main())
