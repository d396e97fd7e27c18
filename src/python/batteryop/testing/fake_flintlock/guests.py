"""What runs a fake Host's MicroVMs: the backend behind `VmStore` and `ExecService` (TD-010).

`--guests` picks one per fake flintlockd:
- `sandbox` (the default, `SandboxGuests`): no VM. A MicroVM becomes CREATED `--boot-delay`
  seconds after create and its commands run on this machine in its sandbox directory
  (`execution.run_command`);
- `qemu` (`qemu.QemuGuests`): each MicroVM is a QEMU guest of the Debian guest image with
  flintlock's guest agent, and every exec is relayed to that agent.

A backend is told when a MicroVM is created (`start`, with callbacks for "ready" and "gone")
and deleted (`stop`), and runs each exec stream (`exec`) after `ExecService` has checked it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.testing.fake_flintlock.execution import ExecTimings, run_command
from batteryop.testing.fake_flintlock.vms import VmRecord

Response = microvmexec_pb2.ExecCommandResponse
Requests = AsyncIterator[microvmexec_pb2.ExecCommandRequest]


class Guests(Protocol):
    """Runs the guests of one fake Host."""

    def start(self, record: VmRecord, ready: Callable[[], None], gone: Callable[[], None]) -> None:
        """Bring record's guest up; call `ready` once exec can reach it, `gone` if it dies."""

    def stop(self, record: VmRecord) -> None:
        """Tear record's guest down (DeleteMicroVM); neither callback is called after this."""

    def exec(
        self, record: VmRecord, start: microvmexec_pb2.ExecStart, requests: Requests
    ) -> AsyncIterator[Response]:
        """The responses of one exec stream, `exit_code` last; a failure to reach the guest
        raises `GuestUnreachableError`. Closing the iterator early stops the command."""
        ...

    def describe(self) -> list[dict[str, Any]]:
        """One JSON object per running guest, for the control API's `GET /guests`."""
        ...

    async def close(self) -> None:
        """Stop every guest (the fake is stopping)."""


class GuestUnreachableError(ConnectionError):
    """The guest's agent could not be reached (flintlockd answers UNKNOWN)."""


class SandboxGuests:
    """No VM: ready after a delay, commands run here in the MicroVM's sandbox."""

    def __init__(self, *, boot_delay: float = 0.0, timings: ExecTimings | None = None) -> None:
        self._boot_delay = boot_delay
        self._timings = timings
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def start(self, record: VmRecord, ready: Callable[[], None], gone: Callable[[], None]) -> None:
        uid = record.uid

        def fire() -> None:
            self._timers.pop(uid, None)
            ready()

        self._timers[uid] = asyncio.get_running_loop().call_later(max(self._boot_delay, 0), fire)

    def stop(self, record: VmRecord) -> None:
        timer = self._timers.pop(record.uid, None)
        if timer is not None:
            timer.cancel()

    def exec(
        self, record: VmRecord, start: microvmexec_pb2.ExecStart, requests: Requests
    ) -> AsyncIterator[Response]:
        return run_command(record, start, requests, timings=self._timings)

    def describe(self) -> list[dict[str, Any]]:
        return []

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
