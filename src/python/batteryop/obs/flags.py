"""Flag values every deployable's `config` reads the same way: durations, the error that
names the flag, and each flag's environment twin.

    add = flag_adder(parser)                  # add(flag, default, help)
    add("--settle-time", "30s", "...")        # default: $BATTERYOP_SETTLE_TIME, else "30s"

    duration("--settle-time", "30s")          # timedelta(seconds=30)
    duration("--max", "0", positive=True)     # FlagError: --max: '0' must be greater than zero

A duration is a number with an optional unit, `ms`, `s`, `m` or `h` (a bare number is
seconds): `500ms`, `30s`, `1.5m`, `168h`, `0`. A boolean is `true` or `false` (also `1`/`0`,
`yes`/`no`, any case).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Final, Protocol

_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class FlagError(ValueError):
    """A flag has a value the program cannot run with; `flag` names it."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def duration(flag: str, value: str, *, positive: bool = False) -> timedelta:
    """`value` as a timedelta; never negative, and greater than zero when `positive`."""
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise FlagError(flag, f"{value!r} is not a duration such as 500ms, 30s, 1m or 168h")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if positive and seconds <= 0:
        raise FlagError(flag, f"{value!r} must be greater than zero")
    return timedelta(seconds=seconds)


def boolean(flag: str, value: object) -> bool:
    """`value` (a flag's text, or a default already a bool) as a bool."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise FlagError(flag, f"{value!r} must be true or false")


def env_name(flag: str) -> str:
    """The environment twin of a flag: `--call-timeout` -> `BATTERYOP_CALL_TIMEOUT`."""
    return "BATTERYOP_" + flag.lstrip("-").upper().replace("-", "_")


def flag_adder(
    parser: argparse.ArgumentParser,
    *,
    environ: Mapping[str, str] | None = None,
    fallbacks: Mapping[str, str] | None = None,
) -> Callable[[str, object, str], None]:
    """`add(flag, default, help)` for `parser`: the flag's default is its environment twin
    (`env_name`) when set, else the variable `fallbacks` names for it (such as `NODE_NAME`),
    else `default`. `environ` is `os.environ` unless given."""
    env = os.environ if environ is None else environ
    others = fallbacks or {}

    def add(flag: str, default: object, help: str) -> None:
        value = env.get(env_name(flag))
        if value is None and flag in others:
            value = env.get(others[flag])
        parser.add_argument(flag, default=value if value is not None else default, help=help)

    return add


class ProcessDefaults(Protocol):
    """The defaults of the flags every long-running deployable shares."""

    @property
    def health_probe_bind_address(self) -> str: ...
    @property
    def metrics_bind_address(self) -> str: ...
    @property
    def log_level(self) -> str: ...
    @property
    def log_format(self) -> str: ...


def add_process_flags(add: Callable[[str, object, str], None], d: ProcessDefaults) -> None:
    """The probe, metrics, kubeconfig and logging flags, through a parser's own `add(flag,
    default, help)` (which reads each flag's environment twin)."""
    add("--health-probe-bind-address", d.health_probe_bind_address, "/healthz, /readyz; 0 = off")
    add("--metrics-bind-address", d.metrics_bind_address, "/metrics; 0 = off")
    add("--kubeconfig", None, "kubeconfig file; default: in-cluster, else $KUBECONFIG")
    add("--log-level", d.log_level, "debug, info, warning or error")
    add("--log-format", d.log_format, "json or text")
