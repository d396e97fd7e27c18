"""The harnesses' long steps say what they do while they do it (issue 49: a cold build of the
control plane went quiet for 224 s)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from batteryop.api.clock import FakeClock
from batteryop.release.gomodules import go_binary
from batteryop.testing.controlplane.gobuild import ControlPlaneBuildError, ToolSet
from batteryop.testing.polling import wait_until
from batteryop.testing.progress import EVERY_SECONDS, Heartbeat, format_elapsed, run_reporting


def test_a_heartbeat_speaks_when_a_line_is_due_and_says_what_is_left() -> None:
    clock, said = FakeClock(), list[str]()
    beat = Heartbeat(
        "Building etcd (2 of 3)", left="kubelet", every=15, say=said.append, clock=clock
    )
    assert not beat.beat("10 packages compiled"), "nothing is due yet"
    clock.advance(15)
    assert beat.beat("10 packages compiled")
    clock.advance(60)
    assert beat.beat("built", force=True)
    assert said == [
        "Building etcd (2 of 3): 15 s, 10 packages compiled; then kubelet",
        "Building etcd (2 of 3): 1 min 15 s, built; then kubelet",
    ]
    assert format_elapsed(3599.9) == "59 min 59 s"


async def test_work_watched_by_a_heartbeat_gets_a_line_each_time_one_is_due() -> None:
    clock, said = FakeClock(), list[str]()
    beat = Heartbeat("Starting battery", left="the operator", say=said.append, clock=clock)
    done = asyncio.Event()

    async def work() -> int:
        await done.wait()
        return 7

    async def seen() -> tuple[int, int]:
        return len(said), clock.sleepers

    watched = asyncio.create_task(beat.watch(work()))
    await wait_until(seen, lambda s: s == (0, 1), what="the watch waiting", interval=0.01)
    clock.advance(14)
    await asyncio.sleep(0)
    assert said == [], "no line before one is due"
    clock.advance(1)
    await wait_until(seen, lambda s: s == (1, 1), what="the first line", interval=0.01)
    clock.advance(EVERY_SECONDS * 3)  # one wake-up, one line: no catching up
    await wait_until(seen, lambda s: s == (2, 1), what="the second line", interval=0.01)
    done.set()
    assert await watched == 7
    assert said == [
        "Starting battery: 15 s; then the operator",
        "Starting battery: 1 min 00 s; then the operator",
    ]
    assert clock.sleepers == 0, "the watch left its wait behind"


async def test_cancelling_the_watch_cancels_the_work() -> None:
    clock = FakeClock()
    work = asyncio.ensure_future(asyncio.Event().wait())
    watched = asyncio.create_task(Heartbeat("Waiting", say=print, clock=clock).watch(work))

    async def sleepers() -> int:
        return clock.sleepers

    await wait_until(sleepers, lambda n: n == 1, what="the watch waiting", interval=0.01)
    watched.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watched
    assert work.cancelled() and clock.sleepers == 0


def test_a_command_that_prints_nothing_for_a_while_still_gets_its_lines() -> None:
    said: list[str] = []
    beat = Heartbeat("Waiting", every=0.05, say=said.append)
    script = (
        "import sys, time\n"
        "for p in ('a/b', 'c/d'): print(p, file=sys.stderr, flush=True)\n"
        "time.sleep(0.3)\n"  # the command's own quiet spell, which the lines must cover
        "print('# c/d', file=sys.stderr); print('x.go:1:2: boom', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    done = run_reporting(
        [sys.executable, "-c", script],
        beat,
        unit="packages",
        is_progress=lambda line: not line.startswith("#") and ":" not in line,
    )
    assert (done.returncode, done.progress_lines) == (3, 2)
    assert done.tail == "# c/d\nx.go:1:2: boom"
    assert len(said) >= 3 and said[-1].endswith("2 packages"), said


def _module(tmp: Path, body: str) -> Path:
    module = tmp / "hello"
    module.mkdir()
    (module / "go.mod").write_text("module example.com/hello\n\ngo 1.21\n")
    (module / "go.sum").write_text("")
    (module / "main.go").write_text(body)
    return module


def test_a_go_build_says_each_binary_and_its_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    go_binary()  # the machine's Go, as the real builds use
    monkeypatch.setenv("BATTERYOP_CACHE", str(tmp_path / "cache"))
    module = _module(tmp_path, 'package main\n\nfunc main() { println("hi") }\n')
    tools = ToolSet("hello", module, {"hello": "example.com/hello", "again": "example.com/hello"})
    with caplog.at_level(logging.WARNING):
        bins = tools.ensure(module)
    assert bins["hello"].is_file() and bins["again"].is_file()
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("Building hello (1 of 2):") for line in lines), lines
    assert any("then again" in line for line in lines), lines
    assert any(line.startswith("Building again (2 of 2):") and "built" in line for line in lines)


def test_a_failed_go_build_names_the_error_not_the_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go_binary()
    monkeypatch.setenv("BATTERYOP_CACHE", str(tmp_path / "cache"))
    module = _module(tmp_path, "package main\n\nfunc main() { undefined() }\n")
    with pytest.raises(ControlPlaneBuildError) as caught:
        ToolSet("broken", module, {"broken": "example.com/hello"}).ensure(module)
    assert "undefined: undefined" in str(caught.value)
