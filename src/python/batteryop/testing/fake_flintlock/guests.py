"""What runs a fake Host's MicroVMs: the backend behind `VmStore` and `ExecService` (TD-010).

`--guests` picks one per fake flintlockd:
- `sandbox` (the default, `SandboxGuests`): no VM. A MicroVM becomes CREATED `--boot-delay`
  seconds after create and its commands run on this machine in its sandbox directory
  (`execution.run_command`);
- `qemu` (`qemu.QemuGuests`): each MicroVM is a QEMU guest of the Debian guest image with
  flintlock's guest agent, and every exec is relayed to that agent.

A backend is told when a MicroVM is created (`start`, with callbacks for "ready" and "gone")
and deleted (`stop`), runs each exec stream (`exec`) after `ExecService` has checked it, and
opens the byte connection to a MicroVM's sshd for each `MicroVMSSHProxy` stream (`ssh`) after
`SSHProxyService` has checked it: the sandbox's own sshd (`sshd.py`), or the guest agent's SSH
port in a QEMU guest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.testing.fake_flintlock import sshd
from batteryop.testing.fake_flintlock.execution import ExecTimings, run_command
from batteryop.testing.fake_flintlock.vms import VmRecord

log = logging.getLogger(__name__)

Response = microvmexec_pb2.ExecCommandResponse
Requests = AsyncIterator[microvmexec_pb2.ExecCommandRequest]
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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

    async def ssh(self, record: VmRecord) -> Connection:
        """A new byte connection to record's sshd (what the guest agent's SSH port gives: the
        guest may close it at once when it has no sshd); a failure to reach the guest raises
        `GuestUnreachableError`."""
        ...

    def describe(self) -> list[dict[str, Any]]:
        """One JSON object per running guest, for the control API's `GET /guests`."""
        ...

    async def close(self) -> None:
        """Stop every guest (the fake is stopping)."""


class GuestUnreachableError(ConnectionError):
    """The guest's agent could not be reached (flintlockd answers UNKNOWN)."""


class SandboxGuests:
    """No VM: ready after a delay, commands run here in the MicroVM's sandbox; with `ssh`, each
    MicroVM has a host key from boot on and its own sshd from its first SSH stream on
    (`sshd.py`)."""

    def __init__(
        self, *, boot_delay: float = 0.0, timings: ExecTimings | None = None, ssh: bool = False
    ) -> None:
        self._boot_delay = boot_delay
        self._timings = timings
        self._ssh = ssh
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._sshds: dict[str, asyncio.Task[sshd.Sshd]] = {}
        self._reaping: set[asyncio.Task[None]] = set()
        self._warned = False

    def start(self, record: VmRecord, ready: Callable[[], None], gone: Callable[[], None]) -> None:
        uid = record.uid
        if self._ssh:
            sshd.write_host_key(record.rootfs)

        def fire() -> None:
            self._timers.pop(uid, None)
            ready()

        self._timers[uid] = asyncio.get_running_loop().call_later(max(self._boot_delay, 0), fire)

    def stop(self, record: VmRecord) -> None:
        timer = self._timers.pop(record.uid, None)
        if timer is not None:
            timer.cancel()
        self._stop_sshd(record.uid)

    def _stop_sshd(self, uid: str) -> None:
        starting = self._sshds.pop(uid, None)
        if starting is None:
            return
        if not starting.done():
            starting.cancel()
            return
        if starting.cancelled() or starting.exception() is not None:
            return
        running = starting.result()
        running.kill()
        reaping = asyncio.ensure_future(running.wait())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)

    async def ssh(self, record: VmRecord) -> Connection:
        program = sshd.find_sshd()
        if program is None:
            if not self._warned:
                self._warned = True
                log.warning("no sshd found (looked for /usr/sbin/sshd): SSHProxy streams end "
                            "at once; install Debian's openssh-server")  # fmt: skip
            return await asyncio.open_connection(sock=sshd.closed_connection())
        starting = self._sshds.get(record.uid)
        if starting is None or _gone(starting):
            starting = asyncio.ensure_future(sshd.start_sshd(program, record))
            self._sshds[record.uid] = starting
        await asyncio.wait({starting})  # shared: one stream giving up does not stop it
        if starting.cancelled():  # the MicroVM was deleted meanwhile
            return await asyncio.open_connection(sock=sshd.closed_connection())
        error = starting.exception()
        if error is not None:
            # The guest agent closes the connection when it cannot dial sshd; so does this.
            log.warning("microvm %s: %s", record.uid, error)
            return await asyncio.open_connection(sock=sshd.closed_connection())
        running = starting.result()
        try:
            return await asyncio.open_connection(sshd.LISTEN_ADDRESS, running.port)
        except OSError as err:
            log.warning("microvm %s: dialing its sshd: %s", record.uid, err)
            return await asyncio.open_connection(sock=sshd.closed_connection())

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
        for uid in list(self._sshds):
            self._stop_sshd(uid)
        await asyncio.gather(*self._reaping, return_exceptions=True)


def _gone(starting: asyncio.Task[sshd.Sshd]) -> bool:
    """starting failed, or its sshd has exited since (it is started again)."""
    if not starting.done():
        return False
    if starting.cancelled() or starting.exception() is not None:
        return True
    return starting.result().process.returncode is not None
