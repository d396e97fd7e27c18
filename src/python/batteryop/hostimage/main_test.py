"""`python -m batteryop.hostimage`: files written, one-line errors, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from batteryop.hostimage.__main__ import main
from batteryop.hostimage.host_env import read_env


@pytest.mark.req("HI-037", "HI-051")
def test_host_env_without_a_file_has_the_default_subnet(tmp_path: Path) -> None:
    out = tmp_path / "run/host.env"
    assert main(["host-env", "--conf", str(tmp_path / "absent"), "--out", str(out)]) == 0
    env = read_env(out.read_text())
    assert env["GUEST_SUBNET"] == "10.220.0.0/16"
    assert env["GUEST_GATEWAY"] == "10.220.0.1"


def test_an_invalid_file_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "host.conf"
    conf.write_text("GUEST_SUBNET=10.0.0.0/30\n")
    assert main(["host-env", "--conf", str(conf), "--out", str(tmp_path / "host.env")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("host configuration invalid: host.conf line 1: GUEST_SUBNET: ")
    assert not (tmp_path / "host.env").exists()


def test_kubelet_env_from_the_files_a_host_has(tmp_path: Path) -> None:
    (tmp_path / "host.env").write_text("HOST_RESERVE_VCPU=2\nHOST_RESERVE_MEMORY_MB=4096\n")
    (tmp_path / "versions.env").write_text(
        "FIRECRACKER_VERSION=v1.16.1\nCLOUD_HYPERVISOR_VERSION=v48.0\n"
    )
    (tmp_path / "meminfo").write_text("MemTotal: 33554432 kB\n")
    out = tmp_path / "kubelet.env"
    args = ["kubelet-env", "--host-env", str(tmp_path / "host.env")]
    args += ["--versions", str(tmp_path / "versions.env"), "--meminfo", str(tmp_path / "meminfo")]
    assert main([*args, "--cpus", "16", "--out", str(out)]) == 0
    text = out.read_text()
    assert "host-image=unknown" in text
    assert "--system-reserved=cpu=14,memory=28672Mi" in text


def test_kubelet_env_without_host_env_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["kubelet-env", "--host-env", str(tmp_path / "no"), "--versions", str(tmp_path / "no")]
    assert main([*args, "--out", str(tmp_path / "k.env")]) == 1
    assert capsys.readouterr().err.startswith("kubelet configuration failed: ")
