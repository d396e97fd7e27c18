"""Tests of `run_deployable`, every deployable's `main()`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from batteryop.obs.process import run_deployable

log = logging.getLogger("batteryop.test_process")


@dataclass(frozen=True)
class Config:
    log_level: str = "info"
    log_format: str = "text"


class ProblemsError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class CannotStartError(RuntimeError):
    pass


def parse(argv: Sequence[str] | None) -> Config:
    if argv and argv[0] == "--bad":
        raise ValueError("--bad: not a flag this program has")
    if argv and argv[0] == "--two-bad":
        raise ProblemsError(["--a: must be set", "--b: must be a duration"])
    return Config()


async def run_and_return(config: Config, stop: asyncio.Event) -> None:
    return None


async def run_and_fail(config: Config, stop: asyncio.Event) -> None:
    raise CannotStartError("the API server refused us")


def main(argv: Sequence[str], run: object = run_and_return) -> int:
    return run_deployable(
        "prog",
        argv,
        parse=parse,
        run=run,  # type: ignore[arg-type]
        fatal={CannotStartError: 1},
        log=log,
    )


def test_a_bad_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bad"]) == 2
    assert capsys.readouterr().err == "prog: --bad: not a flag this program has\n"


def test_an_error_listing_problems_prints_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--two-bad"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "prog: --a: must be set",
        "prog: --b: must be a duration",
    ]


def test_a_fatal_error_is_one_line_and_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([], run_and_fail) == 1
    assert capsys.readouterr().err == "prog: the API server refused us\n"


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_run_that_returns_exits_0_and_logs_stopped() -> None:
    # On the logger itself: run_deployable sets up logging, replacing the root's handlers.
    recorded = Recorded()
    log.addHandler(recorded)
    try:
        assert main([]) == 0
    finally:
        log.removeHandler(recorded)
        logging.getLogger().handlers.clear()
    assert recorded.messages == ["Stopped"]
