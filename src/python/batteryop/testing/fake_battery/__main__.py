"""Run the fake battery as its own process: `python -m batteryop.testing.fake_battery`.

It takes poolmgrd v0.4.0's flags (`-config`, `-db`, `-log-level`) so it can stand in the
battery sidecar's place, or `--listen` and `--host NAME=TARGET` flags. Once serving it prints one
JSON line on stdout: {"target": ..., "control": ..., "pid": ...}.

With `-db PATH` its Pools, VMs, Leases, event outbox and Host rows live in that file and survive
the process (BA-060; `db.py` has the format); without it they live in memory only. A file it
cannot read (another format or version, or corrupt) stops it at start with one line naming the
file and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from batteryop.api.clock import Clock, FakeClock, SystemClock
from batteryop.testing.fake_battery.battery import FakeBattery, Timings
from batteryop.testing.fake_battery.control import make_app
from batteryop.testing.fake_battery.db import DatabaseError
from batteryop.testing.fake_battery.hosts import HostConfig, HostTLSConfig
from batteryop.testing.processes import stdin_closed

log = logging.getLogger("fake-battery")

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class FakeBatteryConfigError(ValueError):
    """The config file or flags cannot be used; names the file or flag."""

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.source = source


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string ("10s", "1m30s", "250ms"); a bare number is seconds."""
    text = text.strip()
    with contextlib.suppress(ValueError):
        return float(text)
    pos = 0
    total = 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}")
    return total


@dataclass
class Settings:
    listen: str = "127.0.0.1:50051"
    hosts: list[HostConfig] = field(default_factory=list)
    sweep_interval: float = 10.0
    warning_window: float = 30.0
    basic_auth_token: str = ""


def _listen_address(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    return f"{host or '0.0.0.0'}:{port}"


def load_config(path: str) -> Settings:
    """poolmgrd v0.4.0's JSON config: api_server, hosts, sweep_interval, warning_window."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw: Any = json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        raise FakeBatteryConfigError(path, str(err)) from err
    if not isinstance(raw, dict):
        raise FakeBatteryConfigError(path, "the config must be a JSON object")
    api = raw.get("api_server")
    if not isinstance(api, dict) or not api.get("addr"):
        raise FakeBatteryConfigError(path, "api_server.addr is required")
    tls = api.get("tls") or {}
    if tls and not tls.get("insecure", False):
        raise FakeBatteryConfigError(
            path, "the fake battery serves plaintext only (api_server.tls.insecure)"
        )
    settings = Settings(
        listen=_listen_address(str(api["addr"])),
        basic_auth_token=str(api.get("basic_auth_token", "")),
    )
    for name in ("sweep_interval", "warning_window"):
        if name in raw:
            try:
                value = parse_duration(str(raw[name]))
            except ValueError as err:
                raise FakeBatteryConfigError(path, f"{name}: {err}") from err
            if value <= 0:
                raise FakeBatteryConfigError(path, f"{name} must be positive")
            setattr(settings, name, value)
    hosts = raw.get("hosts") or []
    if not hosts:
        raise FakeBatteryConfigError(path, "at least one host is required")
    for i, host in enumerate(hosts):
        if not isinstance(host, dict) or not host.get("name") or not host.get("address"):
            raise FakeBatteryConfigError(path, f"hosts[{i}]: name and address are required")
        host_tls = host.get("tls") or {}
        tls_config = HostTLSConfig(
            insecure=bool(host_tls.get("insecure", False)),
            ca_file=str(host_tls.get("ca_file", "")),
            cert_file=str(host_tls.get("cert_file", "")),
            key_file=str(host_tls.get("key_file", "")),
        )
        problem = tls_config.problem()
        if problem is not None:
            raise FakeBatteryConfigError(path, f"hosts[{i}] ({host['name']}): {problem}")
        settings.hosts.append(HostConfig(str(host["name"]), str(host["address"]), tls_config))
    return settings


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fake-battery",
        description="A fake battery (poolmgrd v0.4.0) for tests and the dev stack.",
    )
    # TD-107: poolmgrd's own flags, so this process can stand where the sidecar stands.
    parser.add_argument("-config", "--config", help="poolmgrd's JSON config file")
    parser.add_argument(
        "-db",
        "--db",
        help="the database file that keeps the state across restarts (default: memory only)",
    )
    parser.add_argument(
        "-log-level",
        "--log-level",
        default="info",
        choices=["debug", "info", "warn", "error"],
    )
    parser.add_argument("--listen", help="gRPC address (default 127.0.0.1:50051)")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="a Host and its flintlockd target (plaintext); repeatable",
    )
    parser.add_argument("--sweep-interval", help="Go duration (default 10s)")
    parser.add_argument("--warning-window", help="Go duration (default 30s)")
    parser.add_argument("--reconcile-interval", default="10s", help="Go duration (default 10s)")
    # Not poolmgrd's (its waits are fixed): a QEMU guest under TCG takes longer to boot.
    parser.add_argument(
        "--create-timeout", default="60s", help="wait for CREATED, Go duration (default 60s)"
    )
    parser.add_argument(
        "--agent-timeout", default="30s", help="wait for the guest agent (default 30s)"
    )
    parser.add_argument("--fake-clock", action="store_true", help="a clock moved by /advance")
    parser.add_argument("--host-api", action="store_true", help="serve battery main's host RPCs")
    parser.add_argument("--basic-auth-token", default=None)
    parser.add_argument("--control", default="127.0.0.1:0", help="control API address")
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    settings = load_config(args.config) if args.config else Settings()
    if args.listen:
        settings.listen = args.listen
    for item in args.host:
        name, sep, target = item.partition("=")
        if not sep or not name or not target:
            raise FakeBatteryConfigError("--host", f"expected NAME=TARGET, got {item!r}")
        settings.hosts.append(HostConfig(name, target))
    try:
        if args.sweep_interval:
            settings.sweep_interval = parse_duration(args.sweep_interval)
        if args.warning_window:
            settings.warning_window = parse_duration(args.warning_window)
    except ValueError as err:
        raise FakeBatteryConfigError("flags", str(err)) from err
    if args.basic_auth_token is not None:
        settings.basic_auth_token = args.basic_auth_token
    return settings


async def serve(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    clock: Clock = FakeClock() if args.fake_clock else SystemClock()
    timings = Timings(
        sweep_interval=settings.sweep_interval,
        warning_window=settings.warning_window,
        reconcile_interval=parse_duration(args.reconcile_interval),
        create_timeout=parse_duration(args.create_timeout),
        agent_timeout=parse_duration(args.agent_timeout),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeBattery.start(
        hosts=settings.hosts,
        address=settings.listen,
        clock=clock,
        timings=timings,
        basic_auth_token=settings.basic_auth_token,
        host_api=args.host_api,
        db=args.db or None,
    ) as battery:
        runner = web.AppRunner(make_app(battery))
        await runner.setup()
        host, _, port = args.control.rpartition(":")
        site = web.TCPSite(runner, host or "127.0.0.1", int(port))
        await site.start()
        control_port = runner.addresses[0][1]
        ready = {
            "target": battery.target,
            "control": f"http://{host or '127.0.0.1'}:{control_port}",
            "pid": os.getpid(),
        }
        print(json.dumps(ready), flush=True)
        log.info("fake battery serving on %s, control on %s", battery.target, ready["control"])
        waiters: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        if args.exit_on_stdin_eof:
            waiters.append(asyncio.create_task(stdin_closed()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in waiters:
            task.cancel()
        await runner.cleanup()


POOLMGRD_NAME = "poolmgrd"
"""The real battery's process name, which the host registry's restarter looks for."""


def take_poolmgrd_name() -> None:
    """Name this process `poolmgrd` (its `comm`), as the real battery's process is named.

    Where it stands in battery's container (`-config` given), the host registry finds battery's
    process by that name to restart it (IN-012); run from an image, the fake's command line is
    `python3.11 /app/fake-battery.pex ...`, which names no `poolmgrd` (found by the real node,
    issue 23)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, POOLMGRD_NAME.encode(), 0, 0, 0)  # PR_SET_NAME


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.config:
        take_poolmgrd_name()
    level = {"warn": "WARNING"}.get(args.log_level, args.log_level.upper())
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        asyncio.run(serve(args))
    except (FakeBatteryConfigError, DatabaseError) as err:
        print(f"fake-battery: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
