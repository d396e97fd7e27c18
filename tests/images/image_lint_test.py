"""Every shell script under src/images passes shellcheck (Debian's package), and the Host
Image's SELinux module compiles and packages (Debian's checkpolicy and semodule-utils)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from images.hostfs import HOST, have

SCRIPTS = sorted(Path("src/images").rglob("*.sh"))


def test_there_are_scripts_to_check() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_the_script_passes_shellcheck(script: Path) -> None:
    done = subprocess.run(
        [
            have("shellcheck"),
            "--external-sources",
            "--source-path=SCRIPTDIR",
            "--severity=style",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.req("HI-012", "HI-013", "HI-065", "HI-072")
def test_the_selinux_module_compiles_and_packages(tmp_path: Path) -> None:
    mod, pp = tmp_path / "battery.mod", tmp_path / "battery.pp"
    done = subprocess.run(
        [have("checkmodule"), "-M", "-m", "-o", str(mod), str(HOST / "selinux/battery.te")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [
            have("semodule_package"),
            "-o",
            str(pp),
            "-m",
            str(mod),
            "-f",
            str(HOST / "selinux/battery.fc"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert pp.stat().st_size > mod.stat().st_size  # the file contexts went in


@pytest.mark.req("HI-065", "HI-072", "HI-082")
def test_the_file_contexts_label_what_the_host_image_needs() -> None:
    fc = (HOST / "selinux/battery.fc").read_text()
    contexts = {
        line.split()[0]: line.split()[-1]
        for line in fc.splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert contexts[r"/run/battery/host\.env"] == "system_u:object_r:container_ro_file_t:s0"
    assert (
        contexts[r"/run/battery/not-ready\.d(/.*)?"] == "system_u:object_r:container_ro_file_t:s0"
    )
    assert contexts["/etc/battery/flintlockd(/.*)?"] == "system_u:object_r:container_file_t:s0"
    assert contexts["/var/libexec/kubernetes(/.*)?"] == "system_u:object_r:bin_t:s0"
