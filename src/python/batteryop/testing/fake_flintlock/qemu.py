"""The fake flintlockd's QEMU guests (`--guests qemu`): each MicroVM a real Linux VM, every
exec relayed to flintlock's guest agent inside it (TD-010, GI-101).

CreateMicroVM pulls the spec's kernel image and root volume image from their registry by digest
(`images.ImageStore`, standing in for flintlockd's containerd: the kernel file the spec names,
and the root filesystem as an ext4 disk) and starts QEMU on them (`testing.guest_image`'s
machine) with a copy-on-write
qcow2 overlay of its own in the MicroVM's folder, the spec's vCPUs and memory, and the serial
console in `console.log` beside it. There is no /dev/vhost-vsock here, so the agent listens on
TCP (the kernel arguments `guest_image.TCP_AGENT_ARGS`) and QEMU's user network forwards a
loopback port of this machine to it; that port stands in for flintlockd's vsock socket
(flintlock-api.md §6.1); a second port is forwarded to the agent's SSH port (1025), which pipes
each connection to the guest's sshd, for MicroVMSSHProxy (§8.4, GI-102). The MicroVM is PENDING until the agent answers a `ping` (battery's
readiness check, §7), then CREATED. Each exec stream opens one agent connection and relays
frame for frame as flintlockd does (§8.5): the exec request from `ExecStart`, stdin frames
and stdin-EOF, stdout/stderr/error/exit back as responses. A cancelled stream closes the
connection, and the agent then stops the command (SIGTERM to its group, SIGKILL 5 s later).
A QEMU that exits by itself (killed) makes the MicroVM gone; DeleteMicroVM kills QEMU.

Differences from flintlockd with Firecracker: QEMU's `microvm` machine (Firecracker's device
model: virtio-mmio, no PCI, no firmware) under TCG where there is no usable KVM
(`guest_image.accelerator`), CREATED waits for the agent (flintlockd reports CREATED once the VMM runs), the spec's
interfaces get QEMU user networks (no TAP, no bridge, no metadata service), and there is no
agent heartbeat or idle deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api._compat import within
from batteryop.testing import guest_image
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_flintlock import agent_protocol
from batteryop.testing.fake_flintlock.agent_protocol import AgentConnection, Frame
from batteryop.testing.fake_flintlock.guests import Connection, GuestUnreachableError, Requests
from batteryop.testing.fake_flintlock.images import ImagePullError, ImageStore
from batteryop.testing.fake_flintlock.sshproxy import MSG_SSH_UNREACHABLE
from batteryop.testing.fake_flintlock.vms import VmRecord
from batteryop.testing.processes import die_with_parent, file_tail

log = logging.getLogger(__name__)

AGENT_HOST: Final = "127.0.0.1"
BOOT_TIMEOUT_SECONDS: Final = 600.0
PING_INTERVAL_SECONDS: Final = 0.5
PING_TIMEOUT_SECONDS: Final = 2.0
DIAL_TIMEOUT_SECONDS: Final = 10.0  # flintlockd's handshake limit (§8.5)

Response = microvmexec_pb2.ExecCommandResponse


@dataclass
class Guest:
    """One MicroVM's QEMU process and how to reach its agent."""

    uid: str
    process: asyncio.subprocess.Process
    agent_port: int
    ssh_port: int
    """Forwarded to the guest agent's SSH port (1025), for MicroVMSSHProxy."""
    overlay: Path
    started: float
    boot_seconds: float | None = None
    stopping: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def rss_kib(self) -> int | None:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return None


class QemuGuests:
    """Every MicroVM of one fake Host as a QEMU guest."""

    def __init__(
        self, state_dir: Path, *, store: ImageStore | None = None, arch: str = "amd64"
    ) -> None:
        self._state_dir = state_dir
        self._store = store or ImageStore()
        self._arch = arch
        self._accel, self._why = guest_image.accelerator(arch)
        self._guests: dict[str, Guest] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}

    def start(self, record: VmRecord, ready: Callable[[], None], gone: Callable[[], None]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(record, ready, gone))
        self._pending[record.uid] = task
        task.add_done_callback(lambda _: self._pending.pop(record.uid, None))

    async def _run(
        self, record: VmRecord, ready: Callable[[], None], gone: Callable[[], None]
    ) -> None:
        """Boot record's guest, wait for its agent, then watch QEMU until it exits; a guest
        that cannot be started (no image, no QEMU) is gone at once, with the reason logged."""
        try:
            process, guest = await self._launch(record)
        except (OSError, guest_image.BootError, ImagePullError) as err:
            log.error("microvm %s: the guest could not start: %s", record.uid, err)
            gone()
            return
        await self._watch(record, process, guest, ready, gone)

    async def _launch(self, record: VmRecord) -> tuple[asyncio.subprocess.Process, Guest]:
        spec = record.vm.spec
        # What flintlockd mounts from containerd: the kernel file of the kernel image and a
        # disk of the root volume's image, pulled by the references the spec names.
        kernel = await self._store.kernel(spec.kernel.image, spec.kernel.filename, self._arch)
        disk = await self._store.root_disk(spec.root_volume.source.container_source, self._arch)
        overlay = record.directory / "root.qcow2"
        made = await asyncio.create_subprocess_exec(
            "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw",
            "-b", str(disk), str(overlay),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await made.communicate()
        if made.returncode != 0:
            raise OSError(f"qemu-img failed: {err.decode().strip()}")
        port, ssh_port = free_port(AGENT_HOST), free_port(AGENT_HOST)
        argv = guest_image.qemu_command(
            kernel,
            overlay,
            self._accel,
            spec.memory_in_mb,
            arch=self._arch,
            cpus=spec.vcpu,
            disk_format="qcow2",
            forwards=((port, guest_image.AGENT_PORT), (ssh_port, guest_image.SSH_PORT)),
            kernel_args=guest_image.TCP_AGENT_ARGS,
            serial=f"file:{record.directory / 'console.log'}",
        )
        with (record.directory / "qemu.log").open("wb") as qemu_log:
            process = await asyncio.create_subprocess_exec(
                *die_with_parent(argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=qemu_log,
                start_new_session=True,
            )
        guest = Guest(record.uid, process, port, ssh_port, overlay, time.monotonic())
        self._guests[record.uid] = guest
        return process, guest

    async def _watch(
        self,
        record: VmRecord,
        process: asyncio.subprocess.Process,
        guest: Guest,
        ready: Callable[[], None],
        gone: Callable[[], None],
    ) -> None:
        port, overlay = guest.agent_port, guest.overlay
        log.info("microvm %s: QEMU %d (%s: %s), agent on %s:%d", record.uid, process.pid,
                 self._accel, self._why, AGENT_HOST, port)  # fmt: skip
        waiting = asyncio.ensure_future(process.wait())
        try:
            deadline = guest.started + BOOT_TIMEOUT_SECONDS
            while not waiting.done() and time.monotonic() < deadline:
                if await agent_protocol.ping(AGENT_HOST, port, PING_TIMEOUT_SECONDS):
                    guest.boot_seconds = time.monotonic() - guest.started
                    log.info("microvm %s: guest agent answered ping %.1f s after QEMU started",
                             record.uid, guest.boot_seconds)  # fmt: skip
                    ready()
                    break
                await asyncio.wait({waiting}, timeout=PING_INTERVAL_SECONDS)
            else:
                if not waiting.done():
                    log.error("microvm %s: no ping in %.0f s; killing QEMU", record.uid,
                              BOOT_TIMEOUT_SECONDS)  # fmt: skip
                    process.kill()
            code = await waiting
        finally:
            if not waiting.done():  # cancelled: the fake is stopping
                _kill(process)
                await asyncio.shield(waiting)
        self._guests.pop(record.uid, None)
        overlay.unlink(missing_ok=True)
        if not guest.stopping:
            log.warning("microvm %s: QEMU exited (%s); its stderr ends:\n%s", record.uid, code,
                        file_tail(record.directory / "qemu.log", 10))  # fmt: skip
            gone()

    def stop(self, record: VmRecord) -> None:
        guest = self._guests.get(record.uid)
        if guest is not None:
            guest.stopping = True
            _kill(guest.process)
        else:
            task = self._pending.get(record.uid)
            if task is not None:
                task.cancel()

    async def exec(
        self, record: VmRecord, start: microvmexec_pb2.ExecStart, requests: Requests
    ) -> AsyncIterator[Response]:
        guest = self._guests.get(record.uid)
        if guest is None:
            raise GuestUnreachableError(
                "starting guest-agent exec session: dialing guest agent: no guest"
            )
        try:
            conn = await agent_protocol.open_exec(
                AGENT_HOST, guest.agent_port, start, DIAL_TIMEOUT_SECONDS
            )
        except agent_protocol.AgentProtocolError as err:
            raise GuestUnreachableError(f"starting guest-agent exec session: {err}") from err
        feeder = asyncio.create_task(_feed(conn, requests)) if start.has_stdin else None
        try:
            while True:
                try:
                    frame = await conn.receive()
                except (OSError, agent_protocol.AgentProtocolError) as err:
                    raise GuestUnreachableError(f"reading guest-agent exec frame: {err}") from err
                if frame is None:
                    raise GuestUnreachableError("reading guest-agent exec frame: unexpected EOF")
                kind, payload = frame
                if kind == Frame.STDOUT:
                    yield Response(stdout=payload)
                elif kind == Frame.STDERR:
                    yield Response(stderr=payload)
                elif kind == Frame.ERROR:
                    yield Response(error=agent_protocol.error_message(payload))
                elif kind == Frame.EXIT:
                    yield Response(exit_code=agent_protocol.exit_code(payload))
                    return
                # Other frame types (a newer agent's heartbeat) are skipped, as flintlockd does.
        finally:
            if feeder is not None:
                feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feeder
            await conn.close()

    async def ssh(self, record: VmRecord) -> Connection:
        """A TCP connection to the guest agent's SSH port, which pipes it to the guest's sshd
        (and closes it at once when there is none): one connection per stream, as flintlockd
        opens one vsock connection per stream."""
        guest = self._guests.get(record.uid)
        if guest is None:
            raise GuestUnreachableError(f"{MSG_SSH_UNREACHABLE}: no guest")
        try:
            return await within(
                asyncio.open_connection(AGENT_HOST, guest.ssh_port), DIAL_TIMEOUT_SECONDS
            )
        except (OSError, TimeoutError) as err:
            raise GuestUnreachableError(f"{MSG_SSH_UNREACHABLE}: {err}") from err

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "uid": g.uid,
                "pid": g.process.pid,
                "agent_port": g.agent_port,
                "ssh_port": g.ssh_port,
                "boot_seconds": g.boot_seconds,
                "rss_kib": g.rss_kib(),
                "accelerator": self._accel,
            }
            for g in self._guests.values()
        ]

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        for guest in self._guests.values():
            guest.stopping = True
            _kill(guest.process)
        await asyncio.gather(*self._pending.values(), return_exceptions=True)


async def _feed(conn: AgentConnection, requests: Requests) -> None:
    """stdin messages as agent stdin frames; stdin_eof, the client's half-close or a receive
    error as one stdin-EOF frame (§8.5)."""
    try:
        async for request in requests:
            kind = request.WhichOneof("payload")
            if kind == "stdin":
                await conn.send(Frame.STDIN, request.stdin)
            elif kind == "stdin_eof" and request.stdin_eof:
                break
    except Exception as err:  # - a receive error ends stdin, as in flintlockd
        log.debug("exec stdin ended: %s", err)
    with contextlib.suppress(OSError, ConnectionError):
        await conn.send(Frame.STDIN_EOF)


def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
