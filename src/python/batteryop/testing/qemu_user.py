"""Run a command in which another machine's programs run under QEMU's user-mode emulator
(`qemu-user-static`), without changing this machine's binfmt_misc.

`python -m batteryop.testing.qemu_user --arch arm64 -- ARGV...` runs ARGV in a user and mount
namespace of its own, in which a binfmt_misc instance of that namespace (Linux 6.7 and later
give every user namespace its own) hands every aarch64 ELF file to `qemu-aarch64-static`. The
host's registrations, if any, are neither read nor changed, and the instance ends with the
command.

Why not just `qemu-aarch64-static PROGRAM`: the emulator runs one program, and an execve()
inside it is the kernel's, which refuses an aarch64 file (ENOEXEC) unless binfmt_misc knows
it. Our images' entrypoint is `python3.11 /app/NAME.pex`, and a PEX first unzips itself
into PEX_ROOT and then execs the interpreter again on that copy: the emulator alone runs the
first process and fails at that exec. With the registration, every exec of the tree is
emulated, as on an arm64 node.

The namespace maps every user and group to itself (the command can still change to the
image's non-root user), and is made by a fork of this process: the child unshares, the
parent (root outside) writes its maps, the child mounts binfmt_misc on a fresh directory,
registers the emulator and execs ARGV. The registration opens the emulator at once (flag F),
so ARGV may chroot into a root filesystem that has no emulator in it. This process exits as
ARGV does (128 + the signal when a signal ended it), 125 when the namespace cannot be made.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

from batteryop.testing.processes import module_command

DEBIAN_PACKAGE: Final = "qemu-user-static"
CANNOT_EMULATE: Final = 125
"""This process's exit status when it cannot make the namespace (the reason on stderr)."""

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUSER: Final = 0x10000000


@dataclass(frozen=True)
class Machine:
    """A foreign machine: its emulator, and the ELF header bytes (magic under mask) by which
    binfmt_misc knows its executables; the same as Debian's qemu-user-static registers."""

    emulator: str
    magic: bytes
    mask: bytes


MACHINES: Final = {
    # ELF64, little-endian, version 1, e_type EXEC or DYN (mask 0xfe), e_machine 183 (aarch64).
    "arm64": Machine(
        emulator="qemu-aarch64-static",
        magic=b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
        mask=b"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
    ),
}


def emulator(arch: str) -> str | None:
    """The path of `arch`'s emulator, None when it is not installed."""
    return shutil.which(MACHINES[arch].emulator)


def missing(arch: str) -> str:
    """Why `arch` cannot be emulated here, for a test's skip."""
    return (
        f"{MACHINES[arch].emulator} is not installed: Debian's {DEBIAN_PACKAGE} "
        f"(apt-get install {DEBIAN_PACKAGE})"
    )


def unavailable(arch: str) -> str | None:
    """Why `arch`'s programs cannot be run here (no emulator, no root, a kernel without a
    binfmt_misc per user namespace), None when they can: `true` is run the same way."""
    if emulator(arch) is None:
        return missing(arch)
    if os.geteuid() != 0:
        return "writing a user namespace's map of every user needs root"
    argv, env = command(arch, ["true"])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        return f"cannot emulate {arch} here: {proc.stderr.strip()[-500:]}"
    return None


def command(arch: str, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `argv` with `arch`'s programs emulated. `argv`
    gets this process's environment plus PYTHONPATH; give it its own with `env -i`."""
    prefix, env = module_command(__name__)
    return [*prefix, "--arch", arch, "--", *argv], env


def registration(machine: Machine, interpreter: str) -> bytes:
    """The line written to binfmt_misc's `register` for `machine`: magic at offset 0, flag F
    (the kernel opens the interpreter now, not at each exec, so it need not be in a chroot)."""

    def hex_bytes(data: bytes) -> bytes:
        return b"".join(b"\\x%02x" % b for b in data)

    name = machine.emulator.removesuffix("-static").encode()
    return b":%s:M:0:%s:%s:%s:F" % (
        name,
        hex_bytes(machine.magic),
        hex_bytes(machine.mask),
        interpreter.encode(),
    )


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _child(
    argv: Sequence[str], line: bytes, mountpoint: str, unshared: int, mapped: int
) -> NoReturn:
    """In the forked child: unshare, wait for the maps, register, exec."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
        os.write(unshared, b".")
        if os.read(mapped, 1) != b".":
            raise OSError("the parent did not map the namespace's users")
        # A mount namespace made with a user namespace gets the parent's shared mounts as
        # slaves: this mount is seen by this process and its children only.
        _check(
            libc.mount(b"binfmt_misc", mountpoint.encode(), b"binfmt_misc", 0, None),
            "mount binfmt_misc (a user namespace's own instance needs Linux 6.7 or later)",
        )
        with open(os.path.join(mountpoint, "register"), "wb") as register:
            register.write(line)
    except BaseException as err:  # a forked child must never return to the parent's code
        print(f"qemu_user: {err}", file=sys.stderr, flush=True)
        os._exit(CANNOT_EMULATE)
    try:
        os.execvp(argv[0], list(argv))
    except OSError as err:
        print(f"qemu_user: {argv[0]}: {err}", file=sys.stderr, flush=True)
        os._exit(127)


def run(arch: str, argv: Sequence[str]) -> int:
    """Run `argv` with `arch`'s programs emulated; its exit status (see the module's)."""
    interpreter = emulator(arch)
    if interpreter is None:
        print(f"qemu_user: {missing(arch)}", file=sys.stderr)
        return CANNOT_EMULATE
    line = registration(MACHINES[arch], os.path.realpath(interpreter))
    mountpoint = tempfile.mkdtemp(prefix="binfmt_misc-")
    unshared_r, unshared_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:
            os.close(unshared_r)
            os.close(mapped_w)
            _child(argv, line, mountpoint, unshared_w, mapped_r)
        os.close(unshared_w)
        os.close(mapped_r)
        if os.read(unshared_r, 1) == b".":
            try:
                # Every id to itself. Root outside may write any map (no setgroups deny needed).
                for kind in ("uid_map", "gid_map"):
                    Path(f"/proc/{pid}/{kind}").write_text("0 0 4294967295\n")
                os.write(mapped_w, b".")
            except OSError as err:
                print(f"qemu_user: mapping the namespace's users: {err}", file=sys.stderr)
        os.close(mapped_w)  # the child, if still waiting, reads end of file and gives up
        # A Ctrl-C or a SIGTERM to this process is passed on; this process waits for the child.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
        _, status = os.waitpid(pid, 0)
    finally:
        os.rmdir(mountpoint)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batteryop.testing.qemu_user")
    parser.add_argument("--arch", choices=sorted(MACHINES), required=True)
    parser.add_argument("argv", nargs="+", help="the command (after --)")
    ns = parser.parse_args(args)
    return run(ns.arch, ns.argv)


if __name__ == "__main__":
    sys.exit(main())
