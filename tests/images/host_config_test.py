"""battery-host-config as the unit runs it: host.conf parsed by batteryop.hostconf (never
sourced), host.env written, and the not-ready contract kept (the files the Exec Agent reads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from images.hostfs import FakeHost

from batteryop import hostconf
from batteryop.exec_agent.host_checks import not_ready_reasons

UNIT = "battery-host-config"

# One table for both parsers: each line must be refused by batteryop.hostconf and, through the
# image's boot step, leave the Host not ready with the same key named.
INVALID = [
    ("GUEST_SUBNET=10.30.0.0/30", "GUEST_SUBNET"),
    ("GUEST_SUBNET=10.30.0.1/24", "GUEST_SUBNET"),
    ("GUEST_SUBNET=fd00::/64", "GUEST_SUBNET"),
    ("THIN_POOL_DEVICE=nvme1n1", "THIN_POOL_DEVICE"),
    ("THIN_POOL_DEVICE=/dev/x;reboot", "THIN_POOL_DEVICE"),
    ("PROTECTED_CIDRS=10.0.0.0/8,nope", "PROTECTED_CIDRS"),
    ("HOST_RESERVE_VCPU=two", "HOST_RESERVE_VCPU"),
    ("HOST_RESERVE_MEMORY_MB=-1", "HOST_RESERVE_MEMORY_MB"),
    ("HOST_CONTROL_PORTS=9090,70000", "HOST_CONTROL_PORTS"),
    ("EXEC_AGENT_UID=0", "EXEC_AGENT_UID"),
    ("GATEWAY_SERVICE_PORTS=0", "GATEWAY_SERVICE_PORTS"),
    ("GATEWAY_SERVICE_UIDS=0", "GATEWAY_SERVICE_UIDS"),
    ("GATEWAY_SERVICE_UIDS=65532", "GATEWAY_SERVICE_UIDS"),
    ("FLINTLOCKD_CLIENT_CIDRS=$(reboot)", "FLINTLOCKD_CLIENT_CIDRS"),
]


@pytest.mark.req("HI-051")
def test_no_host_conf_means_every_default(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    done = host.run("host-config.sh")
    assert done.returncode == 0, done.stderr
    env = host.host_env()
    assert {k: env[k] for k in hostconf.DEFAULTS} == dict(hostconf.DEFAULTS)
    assert env["GUEST_GATEWAY"] == "10.220.0.1"
    assert (env["GUEST_DHCP_FIRST"], env["GUEST_DHCP_LAST"]) == ("10.220.0.2", "10.220.255.254")
    assert host.not_ready() == {}


@pytest.mark.req("HI-050")
@pytest.mark.parametrize(("line", "key"), INVALID)
def test_an_invalid_value_leaves_the_host_not_ready_naming_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    with pytest.raises(hostconf.HostConfError) as python:
        hostconf.parse(f"{line}\n")
    assert python.value.key == key

    host = FakeHost(tmp_path)
    host.write_host_conf(f"# written by cloud-init\n{line}\n")
    done = host.run("host-config.sh")
    assert done.returncode == 1
    reason = host.not_ready()[UNIT]
    assert reason.count("\n") == 1 and reason.endswith("\n")  # one line
    assert reason.startswith("host configuration invalid: host.conf ")
    assert f"{key}: " in reason
    assert not host.path(host.names["BATTERY_HOST_ENV"]).exists()
    # The Exec Agent's reader reports it as the unit's reason.
    assert not_ready_reasons(host.not_ready_dir) == [f"{UNIT}: {reason.strip()}"]


@pytest.mark.req("HI-050", "HI-052")
def test_the_file_is_parsed_never_run(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    marker = tmp_path / "ran"
    host.write_host_conf(f"GUEST_SUBNET=10.30.0.0/24\ntouch {marker}\n")
    assert host.run("host-config.sh").returncode == 1
    host.write_host_conf(f'PROTECTED_CIDRS="$(touch {marker})"\n')
    assert host.run("host-config.sh").returncode == 1
    host.write_host_conf(f"UNKNOWN_KEY=$(touch {marker})\n")
    assert host.run("host-config.sh").returncode == 0
    assert not marker.exists()


@pytest.mark.req("HI-050")
def test_unknown_keys_are_skipped_with_a_warning_and_values_are_used(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write_host_conf(
        "GUEST_SUBNET=10.30.0.0/24\nSOMETHING_NEW=1\n"
        "PROTECTED_CIDRS=10.0.0.0/16, fd00::/8\nFLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16\n"
    )
    done = host.run("host-config.sh")
    assert done.returncode == 0
    assert "SOMETHING_NEW" in done.stderr
    env = host.host_env()
    assert "SOMETHING_NEW" not in env
    assert env["GUEST_SUBNET"] == "10.30.0.0/24"
    assert env["GUEST_PREFIX_LEN"] == "24"
    assert (env["GUEST_GATEWAY"], env["GUEST_DHCP_LAST"]) == ("10.30.0.1", "10.30.0.254")
    assert env["PROTECTED_CIDRS"] == "10.0.0.0/16,fd00::/8"
    assert (env["PROTECTED_CIDRS4"], env["PROTECTED_CIDRS6"]) == ("10.0.0.0/16", "fd00::/8")
    assert env["FLINTLOCKD_CLIENT_CIDRS4"] == "10.244.0.0/16"


def test_the_not_ready_file_exists_exactly_while_the_config_is_invalid(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write_host_conf("EXEC_AGENT_UID=0\n")
    assert host.run("host-config.sh").returncode == 1
    assert UNIT in host.not_ready()
    host.write_host_conf("EXEC_AGENT_UID=1000\n")
    assert host.run("host-config.sh").returncode == 0
    assert host.not_ready() == {}
    assert host.host_env()["EXEC_AGENT_UID"] == "1000"


@pytest.mark.req("HI-011")
@pytest.mark.parametrize(
    ("kvm", "reason"),
    [
        (None, "KVM is unavailable: /dev/kvm does not exist\n"),
        ("file", "KVM is unavailable: /dev/kvm is not a character device\n"),
        ("null", None),  # a character device that opens for reading and writing
    ],
)
def test_the_kvm_gate(tmp_path: Path, kvm: str | None, reason: str | None) -> None:
    host = FakeHost(tmp_path)
    dev = host.path("/dev/kvm")
    dev.parent.mkdir(parents=True)
    if kvm == "file":
        dev.write_text("")
    elif kvm == "null":
        dev.symlink_to("/dev/null")
    done = host.run("kvm-gate.sh")
    assert done.returncode == (0 if reason is None else 1)
    assert host.not_ready().get("battery-kvm") == reason
