"""The Host checks against a made-up Host: sysfs, /dev and the not-ready directory in a tmp dir,
flintlockd's ServerInfo as a function. Publishing the report is in node_report_test.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2
from batteryop.api.conditions import HostReportReason
from batteryop.exec_agent.host_checks import (
    MAX_MESSAGE_CHARS,
    MAX_REASON_CHARS,
    HostPaths,
    ServerInfo,
    check_host,
    not_ready_reasons,
)
from batteryop.testing.exec_agent import healthy_host


def answers(exec_enabled: bool = True) -> ServerInfo:
    async def server_info() -> microvms_pb2.ServerInfoResponse:
        return microvms_pb2.ServerInfoResponse(version="v0.16.0", exec_enabled=exec_enabled)

    return server_info


async def does_not_answer() -> microvms_pb2.ServerInfoResponse:
    raise ConnectionRefusedError("connection refused")


@pytest.mark.req("EA-030", "EA-031", "EA-032", "EA-033")
async def test_a_healthy_host_is_ready(tmp_path: Path) -> None:
    report = await check_host(healthy_host(tmp_path), answers())
    assert report.ready
    assert report.reason == HostReportReason.READY
    assert report.message == "flintlockd v0.16.0 with exec enabled"


@pytest.mark.req("EA-033", "EA-036")
async def test_a_not_ready_file_names_its_reason(tmp_path: Path) -> None:
    paths = healthy_host(tmp_path)
    (paths.not_ready_dir / "containerd.service").write_text("thin pool not set up yet\nmore\n")
    (paths.not_ready_dir / "empty.service").write_text("")
    report = await check_host(paths, answers())
    assert not report.ready
    assert report.reason == HostReportReason.HOST_IMAGE_NOT_READY
    assert report.message == (
        "Host Image not ready: containerd.service: thin pool not set up yet; "
        "Host Image not ready: empty.service"
    )


@pytest.mark.req("EA-033")
def test_reasons_are_cut_and_a_missing_directory_names_none(tmp_path: Path) -> None:
    assert not_ready_reasons(tmp_path / "absent") == []
    (tmp_path / "long").write_text("x" * 1000)
    assert not_ready_reasons(tmp_path) == ["long: " + "x" * MAX_REASON_CHARS]


@pytest.mark.req("EA-031")
async def test_no_kvm_device_is_kvm_unavailable(tmp_path: Path) -> None:
    paths = healthy_host(tmp_path)
    (paths.kvm_sysfs_dir / "dev").unlink()
    report = await check_host(paths, answers())
    assert (report.ready, report.reason) == (False, HostReportReason.KVM_UNAVAILABLE)

    regular = tmp_path / "kvm"
    regular.write_text("")
    (paths.kvm_sysfs_dir / "dev").write_text("10:232\n")
    report = await check_host(HostPaths(**{**paths.__dict__, "kvm_device": regular}), answers())
    assert report.reason == HostReportReason.KVM_UNAVAILABLE
    assert report.message == f"{regular} is not a character device"


@pytest.mark.req("EA-032")
async def test_no_thin_pool_is_thin_pool_missing(tmp_path: Path) -> None:
    paths = healthy_host(tmp_path)
    report = await check_host(HostPaths(**{**paths.__dict__, "thin_pool": "absent"}), answers())
    assert (report.ready, report.reason) == (False, HostReportReason.THIN_POOL_MISSING)
    off = await check_host(HostPaths(**{**paths.__dict__, "thin_pool": ""}), answers())
    assert off.ready


@pytest.mark.req("EA-030")
async def test_flintlockd_not_answering_or_without_exec_is_not_ready(tmp_path: Path) -> None:
    paths = healthy_host(tmp_path)
    down = await check_host(paths, does_not_answer)
    assert (down.ready, down.reason) == (False, HostReportReason.FLINTLOCKD_NOT_READY)
    assert down.message == "flintlockd: connection refused"
    disabled = await check_host(paths, answers(exec_enabled=False))
    assert (disabled.ready, disabled.reason) == (False, HostReportReason.EXEC_DISABLED)


@pytest.mark.req("EA-030", "EA-031", "EA-032", "EA-033")
async def test_the_first_failing_check_names_the_reason_and_the_message_lists_all(
    tmp_path: Path,
) -> None:
    paths = healthy_host(tmp_path)
    (paths.kvm_sysfs_dir / "dev").unlink()
    for i in range(20):
        (paths.not_ready_dir / f"unit-{i:02}.service").write_text("y" * 200)
    broken = HostPaths(**{**paths.__dict__, "thin_pool": "absent"})
    report = await check_host(broken, does_not_answer)
    assert report.reason == HostReportReason.HOST_IMAGE_NOT_READY
    assert len(report.message) == MAX_MESSAGE_CHARS
    assert report.message.endswith("...")

    (paths.not_ready_dir / "unit-00.service").unlink()
    for i in range(1, 20):
        (paths.not_ready_dir / f"unit-{i:02}.service").unlink()
    report = await check_host(broken, does_not_answer)
    assert report.reason == HostReportReason.KVM_UNAVAILABLE
    assert "no device-mapper device is named absent" in report.message
    assert report.message.endswith("flintlockd: connection refused")
