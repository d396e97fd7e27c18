"""A fake flintlockd: one standalone process per simulated Host (TD-010..TD-013).

It serves flintlock's `microvm.services.api.v1alpha1.MicroVM` (plus our `ServerInfo`),
`microvmexec.services.api.v1alpha1.MicroVMExec` and, with `--enable-ssh-proxy-api` (off by
default, as in flintlockd), `microvmsshproxy.services.api.v1alpha1.MicroVMSSHProxy`
(`sshproxy.py`) over grpc.aio on its own loopback address, with in-memory MicroVMs and
commands that really run, each MicroVM in its own sandbox directory, or, with `--guests qemu`,
in a QEMU guest of the Debian guest image through flintlock's guest agent (`qemu.py`; the
backends are in `guests.py`). Tests drive it through
`FakeFlintlockd` (handle.py), which starts the process and talks to its control API
(server.py) on a second port: down/up, slow and failing creates, a cut exec stream, forced
MicroVM states, inspection. Run by hand: `python -m
batteryop.testing.fake_flintlock --help` (or the `fake-flintlockd` pex).

Deliberate differences from real flintlockd (flintlock-api.md §1, §2, §8):
- No containerd, no network, and by default no VMM: a MicroVM is a record plus a sandbox
  directory. (`--guests qemu`: a QEMU guest instead, with its own differences listed in
  `qemu.py`: QEMU and not Firecracker, TCP to the agent instead of vsock, CREATED only once
  the agent answers, a killed guest makes its MicroVM gone.) In the sandbox it goes
  PENDING -> CREATED after `--boot-delay` (default 0) instead of after a real boot, never
  retries or reaches FAILED by itself (tests force states), and DELETING -> gone after
  `--delete-delay`. Interface status (host device, index, MAC) is made up; no eth0 is added.
- Spec checks cover what the spec documents (name required, namespace default "default",
  vcpu 0->2 in 1..64, memory 0->1024 in 1024..32768, kernel image and filename, root volume not
  virtiofs, at most one virtiofs volume, at least one interface, device_id without '/' or '@',
  no macvtap on firecracker, provider known) with messages of our own; all of them answer
  INVALID_ARGUMENT, where flintlockd may answer some with another code. Names and namespaces
  with '/' (or '.', '..') are refused. `overrides` without `bridge_name` is INVALID_ARGUMENT
  (flintlockd crashes on it). The same name may be created twice (each gets its own uid).
- GetMicroVM and DeleteMicroVM of an unknown uid answer NOT_FOUND with our message;
  ListMicroVMs with an empty namespace lists every namespace.
- `ServerInfo` is our design (no upstream proto was available, see microvms.proto);
  `--no-server-info` answers UNIMPLEMENTED like a flintlockd older than v0.15.0.
- In the sandbox, exec runs the command on this machine, not in a guest: the sandbox's
  `rootfs/` stands in for `/` only as the working directory (`cwd` is mapped inside it; it is
  not a chroot, so absolute paths in commands still see the host); the environment is the sandbox's (HOME,
  TMPDIR inside it; FAKE_FLINTLOCK_VM_UID/NAME/NAMESPACE) with `env` merged over it; `user`
  only sets USER and LOGNAME (no uid switch); there are no heartbeats and no idle deadline;
  a cancelled stream kills the command at once (the guest agent sends SIGTERM first).
  `status.vsock_path` names a socket that does not exist. `--agent-delay` makes exec (and
  SSHProxy) fail as UNKNOWN for that long after CREATED, like a guest agent that is not up yet.
- SSHProxy in the sandbox (`sshd.py`) reaches a real OpenSSH sshd of this machine, one per
  MicroVM, started on its first stream (not at boot) on a free 127.0.0.1 port, with the
  MicroVM's own ed25519 host key (made at boot in `rootfs/etc/ssh/`), root's
  `rootfs/root/.ssh/authorized_keys` for every user, no PAM and no chroot: a session runs as a
  user of this machine (only the fake's own user unless it runs as root) with the sandbox's
  HOME, in that user's real home directory. The connection goes straight to sshd, with no
  guest agent between: a half-close reaches sshd as such (the agent ends both directions when
  either ends). With no sshd installed a stream ends at once with OK and no data, as the agent
  does in a guest without sshd. The message for a guest agent that does not answer is ours.
- TLS uses gRPC's (BoringSSL) defaults, not flintlockd's TLS 1.3 minimum; a client CA alone
  turns on client-certificate verification (flintlockd also wants `--tls-client-validate`).
  No basic-auth token, no HTTP gateway, no gRPC reflection, no metrics.
- Down/up keeps the MicroVMs (as flintlockd keeps its specs in containerd); timers keep
  running while down.
"""

from batteryop.testing.fake_flintlock.handle import FakeFlintlockd, FakeFlintlockdError
from batteryop.testing.fake_flintlock.server import TLSFiles

__all__ = ["FakeFlintlockd", "FakeFlintlockdError", "TLSFiles"]
