from __future__ import annotations

import subprocess

import pytest

from batteryop.testing.host_registry_env import registry_command


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--battery-address=10.0.0.1:50051"], "--battery-address"),
        (["--settle-time=soon"], "--settle-time"),
        (["--battery-config-file=relative.json"], "--battery-config-file"),
        (["--restart-timeout=0"], "--restart-timeout"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_and_exit_2(args: list[str], flag: str) -> None:
    command, env = registry_command()
    done = subprocess.run([*command, *args], capture_output=True, env=env, timeout=60)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1 and lines[0].startswith(f"host-registry: {flag}")
