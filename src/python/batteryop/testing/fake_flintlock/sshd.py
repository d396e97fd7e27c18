"""The sandbox's sshd: one real OpenSSH sshd per MicroVM, for `MicroVMSSHProxy` (TD-013).

With the SSH proxy enabled (`--enable-ssh-proxy-api`), every sandbox MicroVM gets an ed25519
host key at boot, as a guest makes its own at first boot: `rootfs/etc/ssh/ssh_host_ed25519_key`
and its `.pub` (written in-process, so CREATED is not delayed). Its sshd starts on the first
SSHProxy stream to it, not at boot: most MicroVMs of the tests and the dev stack are never
reached over SSH, and a process per MicroVM would cost every one of them. sshd runs in the
foreground (`-D -e`) on a free port of 127.0.0.1 with a config file of its own
(`rootfs/etc/ssh/sshd_config`):

- `ListenAddress 127.0.0.1`, the host key above, `AuthorizedKeysFile
  <sandbox>/rootfs/root/.ssh/authorized_keys` (absolute: where a sandbox exec's
  `$HOME/.ssh/authorized_keys` is, for every user), `PasswordAuthentication no`,
  `KbdInteractiveAuthentication no`, `PermitRootLogin prohibit-password`, `UsePAM no`,
  `StrictModes no` (the sandbox's folders are not sshd's idea of private), `PidFile
  rootfs/run/sshd.pid`, `Subsystem sftp` the installed sftp-server (`internal-sftp` if none);
- `SetEnv` gives sessions the sandbox's HOME and TMPDIR and the MicroVM's identity
  (FAKE_FLINTLOCK_VM_*), as a sandbox exec has them; a session's working directory is still the
  user's own home on this machine (no chroot, as with exec);
- as root, sshd needs its privilege separation user `sshd` (Debian's openssh-server makes it)
  and `/run/sshd`, made here when missing as systemd's `RuntimeDirectory=sshd` makes it. As any
  other user, sshd can log in only that user.

The MicroVM's sshd and every session it forked are killed when the MicroVM is deleted or the
fake stops. With no sshd installed (`/usr/sbin/sshd`, Debian's openssh-server), a stream is
treated as the guest agent treats a guest whose sshd is absent: the connection closes at once
(the RPC ends OK with no data), and one warning says what to install.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_flintlock.execution import DEFAULT_PATH
from batteryop.testing.fake_flintlock.vms import VmRecord

log = logging.getLogger(__name__)

HOST_KEY: Final = "etc/ssh/ssh_host_ed25519_key"
"""The host key's path inside the sandbox's rootfs (`.pub` beside it)."""
CONFIG: Final = "etc/ssh/sshd_config"
PID_FILE: Final = "run/sshd.pid"
LOG_FILE: Final = "sshd.log"
"""sshd's own log, in the MicroVM's folder (beside rootfs/)."""
LISTEN_ADDRESS: Final = "127.0.0.1"
SEARCH_PATH: Final = "/usr/sbin:/usr/local/sbin:/sbin"
SFTP_SERVERS: Final = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server")
START_TIMEOUT_SECONDS: Final = 10.0
PRIVSEP_DIR: Final = Path("/run/sshd")
LISTENING: Final = b"Server listening on "


class SshdUnavailableError(RuntimeError):
    """No sshd could be started for a MicroVM (not installed, or it failed)."""


def find_sshd() -> str | None:
    """sshd's path: Debian installs it as /usr/sbin/sshd, outside most users' PATH."""
    return shutil.which("sshd", path=f"{SEARCH_PATH}:{os.environ.get('PATH', DEFAULT_PATH)}")


def write_host_key(rootfs: Path) -> Path:
    """A fresh ed25519 host key in OpenSSH's format at rootfs/HOST_KEY (mode 0600) and its
    `.pub`, as `ssh-keygen -t ed25519` writes them; returns the private key's path."""
    key = ed25519.Ed25519PrivateKey.generate()
    path = rootfs / HOST_KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    path.with_name(path.name + ".pub").write_bytes(public + b" root@fake-flintlockd\n")
    return path


def sftp_server() -> str:
    for candidate in SFTP_SERVERS:
        if os.access(candidate, os.X_OK):
            return candidate
    return "internal-sftp"


def sshd_config(record: VmRecord, port: int) -> str:
    """The MicroVM's sshd_config (see the module docstring)."""
    rootfs = record.rootfs
    spec = record.vm.spec
    env = {
        "HOME": rootfs / "root",
        "TMPDIR": rootfs / "tmp",
        "FAKE_FLINTLOCK_VM_UID": spec.uid,
        "FAKE_FLINTLOCK_VM_NAME": spec.id,
        "FAKE_FLINTLOCK_VM_NAMESPACE": spec.namespace,
    }
    lines = [
        "# Written by the fake flintlockd for this MicroVM's sandbox (fake_flintlock/sshd.py).",
        f"Port {port}",
        f"ListenAddress {LISTEN_ADDRESS}",
        f"HostKey {rootfs / HOST_KEY}",
        f"AuthorizedKeysFile {rootfs / 'root/.ssh/authorized_keys'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        "StrictModes no",
        f"PidFile {rootfs / PID_FILE}",
        "SetEnv " + " ".join(f'"{k}={v}"' for k, v in env.items()),
        f"Subsystem sftp {sftp_server()}",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Sshd:
    """One MicroVM's running sshd."""

    process: asyncio.subprocess.Process
    port: int
    log_task: asyncio.Task[None]

    def kill(self) -> None:
        """SIGKILL sshd and every session it forked (they leave its process group)."""
        for pid in [*descendants(self.process.pid), self.process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def wait(self) -> None:
        await self.process.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self.log_task


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid, children first, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


async def start_sshd(sshd: str, record: VmRecord) -> Sshd:
    """Start record's sshd and return once it listens; raises SshdUnavailableError with
    sshd's own words when it does not."""
    rootfs = record.rootfs
    if not (rootfs / HOST_KEY).is_file():
        write_host_key(rootfs)
    if os.geteuid() == 0:
        # What systemd's RuntimeDirectory=sshd makes for Debian's ssh.service: the empty
        # folder sshd's unprivileged child chroots into.
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    (rootfs / "run").mkdir(exist_ok=True)
    config = rootfs / CONFIG
    log_path = record.directory / LOG_FILE
    for attempt in (1, 2):  # the free port may be taken before sshd binds it
        port = free_port(LISTEN_ADDRESS)
        config.write_text(sshd_config(record, port))
        process = await asyncio.create_subprocess_exec(
            sshd, "-D", "-e", "-f", str(config),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        assert process.stderr is not None
        said: list[bytes] = []
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                while line := await process.stderr.readline():
                    said.append(line)
                    if line.startswith(LISTENING):
                        task = asyncio.create_task(_copy_log(process.stderr, log_path, said))
                        log.info("microvm %s: sshd %d on %s:%d", record.uid, process.pid,
                                 LISTEN_ADDRESS, port)  # fmt: skip
                        return Sshd(process, port, task)
        except TimeoutError:
            pass
        except BaseException:  # cancelled (the MicroVM is deleted): no sshd is left behind
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        words = b"".join(said).decode(errors="replace").strip()
        log_path.write_text(words + "\n")
        if attempt == 2 or "Address already in use" not in words:
            raise SshdUnavailableError(f"sshd did not start (exit {process.returncode}): {words}")
    raise AssertionError("unreachable")


async def _copy_log(stderr: asyncio.StreamReader, path: Path, said: list[bytes]) -> None:
    with path.open("ab") as out:
        out.write(b"".join(said))
        out.flush()
        while line := await stderr.readline():
            out.write(line)
            out.flush()


def closed_connection() -> socket.socket:
    """One end of a connection whose other end is already closed: what the guest agent gives
    when its sshd is absent (it accepts, fails to dial sshd, and closes)."""
    ours, theirs = socket.socketpair()
    theirs.close()
    return ours
