"""batteryop.testing.qemu_user: its binfmt_misc line, its skip reason naming the Debian
package, and, where it can run here, that the command's exit status comes back and the host's
binfmt_misc is left as it was. tests/release runs the arm64 images with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from batteryop.testing import qemu_user

HOST_BINFMT = Path("/proc/sys/fs/binfmt_misc")


def test_the_registration_is_debian_s_aarch64_line_with_flag_f() -> None:
    line = qemu_user.registration(qemu_user.MACHINES["arm64"], "/usr/bin/qemu-aarch64-static")
    # As /usr/lib/binfmt.d/qemu-aarch64.conf of Debian's qemu-user-static has it, but with the
    # emulator itself (not Debian's argv[0]-preserving wrapper) and flag F only.
    assert line == (
        rb":qemu-aarch64:M:0:"
        rb"\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:"
        rb"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:"
        rb"/usr/bin/qemu-aarch64-static:F"
    )


def test_without_the_emulator_the_reason_names_the_debian_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(qemu_user.shutil, "which", lambda _name: None)
    reason = qemu_user.unavailable("arm64")
    assert reason is not None and "qemu-user-static" in reason, reason


def host_registrations() -> list[str]:
    return sorted(p.name for p in HOST_BINFMT.iterdir()) if HOST_BINFMT.is_dir() else []


def test_the_command_s_exit_status_comes_back_and_the_host_is_unchanged() -> None:
    reason = qemu_user.unavailable("arm64")
    if reason is not None:
        pytest.skip(reason)
    before = host_registrations()
    for status in (0, 3):
        argv, env = qemu_user.command(
            "arm64", [sys.executable, "-c", f"raise SystemExit({status})"]
        )
        assert subprocess.run(argv, env=env, check=False).returncode == status
    # The same users inside: root stays root (the image's user, 65532, is mapped too).
    argv, env = qemu_user.command("arm64", ["id", "-u"])
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(os.geteuid())
    assert host_registrations() == before
