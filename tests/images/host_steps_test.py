"""The other boot steps as their units run them: flintlockd's certificate folder and restart
decision, and the kubelet's configuration through the script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from images.hostfs import FakeHost, read_env, require_root

from batteryop.api import names


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.write_host_conf("EXEC_AGENT_UID=4242\n")
    assert host.run("host-config.sh").returncode == 0
    return host


@pytest.mark.req("HI-072")
def test_the_certificate_folder_belongs_to_the_exec_agent(host: FakeHost) -> None:
    require_root("changing a folder's owner")
    done = host.run("flintlockd-certs.sh")
    assert done.returncode == 0, done.stderr
    folder = host.path(host.names["FLINTLOCKD_CERT_DIR"])
    info = folder.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (4242, 4242, 0o700)
    assert host.not_ready() == {}


@pytest.mark.req("HI-071")
def test_flintlockd_restarts_only_when_a_certificate_really_changed(host: FakeHost) -> None:
    folder = host.path(host.names["FLINTLOCKD_CERT_DIR"])
    folder.mkdir(parents=True)
    (folder / "tls.crt").write_text("cert 1\n")
    (folder / "client-ca.crt").write_text("ca 1\n")
    assert host.run("flintlockd-certs.sh", "record").returncode == 0
    # The Exec Agent rewrites the same files: no restart.
    (folder / "tls.crt").write_text("cert 1\n")
    assert host.run("flintlockd-certs.sh", "changed").returncode == 1
    (folder / "client-ca.crt").write_text("ca 2\n")
    assert host.run("flintlockd-certs.sh", "changed").returncode == 0
    assert host.run("flintlockd-certs.sh", "record").returncode == 0
    assert host.run("flintlockd-certs.sh", "changed").returncode == 1


@pytest.mark.req("HI-060", "HI-061", "HI-074")
def test_the_kubelet_step_writes_labels_and_reserve(host: FakeHost, tmp_path: Path) -> None:
    bootc = tmp_path / "bootc"
    status = {"status": {"booted": {"image": {"imageDigest": "sha256:" + "9f" * 32}}}}
    bootc.write_text(f"#!/bin/sh\necho '{json.dumps(status)}'\n")
    bootc.chmod(0o755)
    meminfo = host.path("/proc/meminfo")
    meminfo.parent.mkdir(parents=True, exist_ok=True)
    meminfo.write_text("MemTotal:       65536000 kB\n")
    done = host.run("kubelet-config.sh", BOOTC=str(bootc), BATTERY_CPUS="32")
    assert done.returncode == 0, done.stderr
    env = read_env(host.path(host.names["BATTERY_KUBELET_ENV"]))
    args = env["KUBELET_BATTERY_ARGS"]
    assert f"{names.HOST_IMAGE_LABEL}={'9f' * 16}," in args
    assert f"{names.HOST_LABEL}=true" in args
    assert f"{names.FIRECRACKER_LABEL}=v1.16.1" in args
    assert args.endswith(" --system-reserved=cpu=30,memory=59904Mi")
