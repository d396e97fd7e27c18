"""Run the operator as a real process for tests: the pex Pants built, or `python -m`.

`OperatorProcess.start(kubeconfig=..., battery_target=...)` starts the operator with a
kubeconfig for the test control plane and battery's loopback target, health and metrics on
free loopback ports, and waits until `/healthz` answers (polling is the only way to see a
process come up). It gives `logs()` for failure messages and `stop()` / `kill()` (a crash,
for restart tests); the context manager stops it and removes its log, also on failure.

The pex is found at `BATTERYOP_OPERATOR_PEX` or where `runtime_package_dependencies` puts
it in the test sandbox; without one the operator runs from the sources on sys.path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from batteryop.testing.controlplane.server import free_port
from batteryop.testing.processes import http_get, module_command, terminate, wait_until_answers

PEX_IN_SANDBOX = Path("src.python.batteryop.operator/battery-operator.pex")


class OperatorStartError(RuntimeError):
    """The operator process exited or never answered its health probe."""


def operator_command() -> tuple[list[str], dict[str, str]]:
    """The command that runs the operator, and its environment: the pex when there is one."""
    pex = os.environ.get("BATTERYOP_OPERATOR_PEX")
    if pex:
        return [pex], dict(os.environ)
    if PEX_IN_SANDBOX.exists():
        return [sys.executable, str(PEX_IN_SANDBOX)], dict(os.environ)
    return module_command("batteryop.operator.main")


def _spawn(argv: Sequence[str], log_fd: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with os.fdopen(log_fd, "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


@dataclass
class OperatorProcess:
    popen: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    metrics_port: int

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        *,
        kubeconfig: Path,
        battery_target: str,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
        command: tuple[list[str], dict[str, str]] | None = None,
    ) -> AsyncIterator[OperatorProcess]:
        proc = await cls.launch(
            kubeconfig=kubeconfig,
            battery_target=battery_target,
            extra_args=extra_args,
            ready_timeout=ready_timeout,
            command=command,
        )
        try:
            yield proc
        finally:
            proc.stop()
            proc.log_path.unlink(missing_ok=True)

    @classmethod
    async def launch(
        cls,
        *,
        kubeconfig: Path,
        battery_target: str,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
        command: tuple[list[str], dict[str, str]] | None = None,
    ) -> OperatorProcess:
        """Start the operator; `command` (argv prefix and environment) replaces
        `operator_command()`, e.g. to run the entrypoint of a release image's root
        filesystem under chroot."""
        health, metrics = free_port(), free_port()
        fd, log_name = tempfile.mkstemp(prefix="battery-operator-", suffix=".log")
        prefix, env = command if command is not None else operator_command()
        argv = [
            *prefix,
            f"--kubeconfig={kubeconfig}",
            f"--battery-address={battery_target}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            "--log-format=text",
            "--log-level=debug",
            *extra_args,
        ]
        proc = cls(_spawn(argv, fd, env), Path(log_name), health, metrics)
        await proc._wait_healthy(ready_timeout)
        return proc

    def _get(self, path: str, port: int | None = None) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{port or self.health_port}{path}")

    async def _wait_healthy(self, timeout: float) -> None:
        try:
            await wait_until_answers(
                self.popen,
                f"http://127.0.0.1:{self.health_port}/healthz",
                timeout,
                what="the operator",
                logs=self.logs,
                error=OperatorStartError,
            )
        except OperatorStartError:
            self.stop()
            raise

    async def readyz(self) -> tuple[int, str]:
        return await asyncio.to_thread(self._get, "/readyz?verbose")

    async def metrics(self) -> str:
        return await asyncio.to_thread(self.metrics_text)

    def metrics_text(self) -> str:
        """The operator's /metrics page (blocking)."""
        return self._get("/metrics", self.metrics_port)[1]

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the process dies wherever it is, as in a crash."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        terminate(self.popen)
