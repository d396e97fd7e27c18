"""`battery shell` and `battery run -t`: a terminal in a claim's MicroVM, through the guest's
sshd (CC-118, EA-130).

The PTY, window changes and the terminal's modes are the system's OpenSSH client's and the
guest sshd's work; what this module adds is the way there and the credentials, each one made
for one session and gone after it:

1. `grant`: a new Ed25519 key pair, made here, in memory. Over the exec path (the Holder's
   token, the claim's authorization, nothing new opened on the Host) one command in the guest
   adds its public key to the login user's `~/.ssh/authorized_keys` (restricted: no
   forwarding of any kind, a PTY allowed), prints the user it ran as, and prints the guest's
   Ed25519 host key once sshd has made it (every MicroVM makes its own at first boot). The
   host key so learned came through the agent's TLS and the token's authorization, so ssh
   then checks it strictly: a man in the middle of the SSH stream cannot pass.
2. `Session`: a folder only this user can enter (mode 0700) holding the private key (0600)
   and a known_hosts file with that host key, and a Unix socket there that the ssh process's
   ProxyCommand connects to and hands to ssh (`ProxyUseFdpass`): the parent `battery`
   process relays that connection through `Claim.proxy_ssh` (the agent's `MicroVMSSHProxy`).
   No second `battery` process, no second login to the cluster; the ProxyCommand is a few
   lines of Python started with `-S` (no site imports).
3. `ssh_argv`: `ssh` with no config file of the user's, the key and known hosts above only,
   no agent, no forwarding, no password prompt.

The folder, the key and the socket are removed when the session ends; the public key stays
in the guest's `authorized_keys`, useless without its private half. The MicroVM is never
reused after its claim (one claim per MicroVM), so nothing outlives the claim there either.

    with Session(claim, user="") as session:
        code = subprocess.call(session.ssh_argv(["uname", "-a"], tty=False))
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

from batteryop.client._exceptions import ShellError

if TYPE_CHECKING:
    from batteryop.client._sync import Claim

HOST_KEY: Final = "etc/ssh/ssh_host_ed25519_key.pub"
"""The guest's Ed25519 host key, relative to `/` (the exec runs with cwd `/`: in the fake
flintlockd's sandbox, `/` is the sandbox's root, so the same path serves both)."""

HOST_KEY_WAIT_TENTHS: Final = 300
"""How long (tenths of a second) the guest command waits for sshd's host key to exist: a
MicroVM whose first boot is still making it is waited for, one without sshd is not forever."""

GRANT: Final = f"""set -eu
umask 077
# The guest agent may start a command with no HOME: the user's home from the password file.
[ -n "${{HOME:-}}" ] || HOME=$(getent passwd "$(id -un)" | cut -d: -f6)
mkdir -p "$HOME/.ssh"
printf '%s\\n' "$1" >>"$HOME/.ssh/authorized_keys"
id -un
i=0
while [ ! -s {HOST_KEY} ]; do
  i=$((i + 1))
  if [ "$i" -gt {HOST_KEY_WAIT_TENTHS} ]; then
    echo "no ssh host key at /{HOST_KEY}: does the MicroVM's image run sshd?" >&2
    exit 3
  fi
  sleep 0.1
done
cat {HOST_KEY}
"""
"""The guest command of step 1 (module doc): `$1` is the authorized_keys line."""

PROXY_SCRIPT: Final = (
    "import socket,sys;"
    "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
    "socket.send_fds(socket.socket(fileno=1),[b'\\0'],[s.fileno()])"
)
"""The ProxyCommand: connect to the session's socket and hand the connection to ssh."""

KEY_OPTIONS: Final = "restrict,pty"
"""authorized_keys options of a session's key: no port, agent or X11 forwarding, no
~/.ssh/rc; a PTY allowed."""


def new_key(comment: str) -> tuple[bytes, str]:
    """A new Ed25519 key pair: the private key in OpenSSH's format, and its public line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, f"{public.decode()} {comment}"


def find_ssh() -> str:
    """The OpenSSH client on PATH; `ShellError` naming what to install when there is none."""
    found = shutil.which("ssh")
    if found is None:
        raise ShellError("no ssh command on PATH: install OpenSSH's client (openssh-client)")
    return found


class Session:
    """One shell session's credentials and relay (module doc); a context manager."""

    def __init__(self, claim: Claim, *, user: str = "") -> None:
        self._claim = claim
        self._ssh = find_ssh()
        self.alias = f"{claim.name}.{claim.namespace}.battery"
        """The name ssh knows the guest's host key by (`HostKeyAlias`)."""
        self._folder = Path(tempfile.mkdtemp(prefix="battery-shell-"))  # mode 0700
        self._listener: socket.socket | None = None
        self._relay: threading.Thread | None = None
        self.error: BaseException | None = None
        """What ended the relay, if it failed (the ssh process reports its own side)."""
        try:
            self.login = self._grant(user)
            self._listen()
        except BaseException:
            self.close()
            raise

    def _grant(self, user: str) -> str:
        """Step 1 of the module doc; the login user."""
        private, public = new_key(f"battery-shell@{self._claim.name}")
        result = self._claim.exec(
            ["sh", "-c", GRANT, "battery-shell", f"{KEY_OPTIONS} {public}"], cwd="/", user=user
        )
        if result.exit_code != 0:
            why = result.stderr.decode(errors="replace").strip().splitlines() or list(result.errors)
            raise ShellError(
                f"claim {self._claim.name}: could not prepare a shell in the MicroVM "
                f"(exit {result.exit_code}): {why[-1] if why else 'no message'}",
                claim=self._claim.name,
            )
        lines = result.stdout.decode(errors="replace").splitlines()
        keys = [line for line in lines[1:] if line.startswith("ssh-ed25519 ")]
        if not lines or not keys:
            raise ShellError(
                f"claim {self._claim.name}: the MicroVM did not show its ssh host key",
                claim=self._claim.name,
            )
        key_file = self._folder / "id_ed25519"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        host_key = " ".join(keys[0].split()[:2])
        (self._folder / "known_hosts").write_text(f"{self.alias} {host_key}\n")
        return lines[0].strip()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self._folder / "ssh.sock"))
        listener.listen(1)
        self._listener = listener
        self._relay = threading.Thread(target=self._serve, name="battery-shell", daemon=True)
        self._relay.start()

    def _serve(self) -> None:
        """Relay the one connection ssh makes through the claim's `MicroVMSSHProxy`."""
        assert self._listener is not None
        try:
            connection, _ = self._listener.accept()
        except OSError:
            return  # closed before ssh connected
        with connection:

            def upstream() -> Iterator[bytes]:
                while chunk := connection.recv(64 * 1024):
                    yield chunk

            try:
                self._claim.proxy_ssh(upstream(), connection.sendall)
            except BaseException as e:  # - reported after ssh exits
                self.error = e
            finally:
                # The guest closed (or the relay failed): ssh sees the end of its connection.
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def ssh_argv(self, command: list[str] | tuple[str, ...], *, tty: bool | None) -> list[str]:
        """`ssh` into the guest as `login` through this session (step 3); `command` run there
        (quoted for its shell, each argument kept whole), or a login shell when empty. `tty`:
        True forces a PTY, False none, None ssh's own choice (a PTY for a shell on a terminal).
        """
        proxy = shlex.join(
            [sys.executable, "-S", "-c", PROXY_SCRIPT, str(self._folder / "ssh.sock")]
        )
        argv = [
            self._ssh,
            "-F",
            "/dev/null",
            *_options(
                IdentityFile=str(self._folder / "id_ed25519"),
                IdentitiesOnly="yes",
                IdentityAgent="none",
                UserKnownHostsFile=str(self._folder / "known_hosts"),
                GlobalKnownHostsFile="/dev/null",
                StrictHostKeyChecking="yes",
                HostKeyAlias=self.alias,
                ProxyCommand=proxy,
                ProxyUseFdpass="yes",
                PasswordAuthentication="no",
                KbdInteractiveAuthentication="no",
                ForwardAgent="no",
                ForwardX11="no",
                ClearAllForwardings="yes",
                ControlMaster="no",
                ControlPath="none",
                UpdateHostKeys="no",
                LogLevel="ERROR",
            ),
        ]
        if tty is True:
            argv.append("-tt")
        elif tty is False:
            argv.append("-T")
        argv += ["-l", self.login, self.alias]
        if command:
            argv += ["--", shlex.join(command)]
        return argv

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the relay to end (after ssh exited)."""
        if self._relay is not None:
            self._relay.join(timeout)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _options(**options: str) -> list[str]:
    return [f"-o{name}={value}" for name, value in options.items()]
