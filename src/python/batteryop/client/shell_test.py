"""`battery shell`'s parts that need no cluster (CC-118): the session key is one OpenSSH takes,
ssh is asked for exactly what the session gives it, and a machine without ssh fails at once
in one line, before anything is claimed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from batteryop.client import ShellError
from batteryop.client._shell import KEY_OPTIONS, find_ssh, new_key
from batteryop.client.cli import EXIT_EXEC_ERROR


@pytest.mark.req("CC-118")
def test_a_session_key_is_an_openssh_ed25519_key_whose_public_half_is_the_line_installed(
    tmp_path: Path,
) -> None:
    private, public = new_key("battery-shell@c1")
    key = tmp_path / "id"
    key.write_bytes(private)
    key.chmod(0o600)
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert derived[:2] == public.split()[:2]
    assert derived[0] == "ssh-ed25519" and public.endswith(" battery-shell@c1")
    assert new_key("x")[1].split()[1] != public.split()[1]  # a new key every session
    assert KEY_OPTIONS.split(",")[0] == "restrict"  # no forwarding of any kind


@pytest.mark.req("CC-118", "CC-109")
def test_without_ssh_the_shell_fails_in_one_line_before_reaching_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {
        **os.environ,
        "PATH": str(empty),
        "PYTHONPATH": os.pathsep.join(sys.path),
        # No such file: a command that read its kubeconfig would fail with another message.
        "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "batteryop.client.cli", "shell", "c1"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == EXIT_EXEC_ERROR, done.stderr
    assert done.stderr == (
        "battery: error: no ssh command on PATH: install OpenSSH's client (openssh-client)\n"
    )
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ShellError, match="no ssh command on PATH"):
        find_ssh()
