"""What the Host Image's configuration files say: modules, containerd, dnsmasq, state paths."""

from __future__ import annotations

import tomllib

import pytest
from images.hostfs import IMAGE_ENV, ROOTFS, read_env

CONTAINERD = tomllib.loads((ROOTFS / "etc/containerd/config.toml").read_text())
IMAGE = read_env(IMAGE_ENV)


def _lines(path: str) -> list[str]:
    text = (ROOTFS / path).read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.req("HI-010")
def test_the_modules_load_at_boot() -> None:
    modules = _lines("usr/lib/modules-load.d/battery.conf")
    assert {"kvm", "vhost_vsock", "dm_thin_pool", "tun", "bridge"} <= set(modules)


@pytest.mark.req("HI-024")
def test_flintlockd_and_containerd_keep_their_state_under_var() -> None:
    assert CONTAINERD["root"].startswith("/var/")
    devmapper = CONTAINERD["plugins"]["io.containerd.snapshotter.v1.devmapper"]
    assert devmapper["root_path"].startswith("/var/")
    assert IMAGE["FLINTLOCKD_STATE_DIR"].startswith("/var/")
    assert IMAGE["CONTAINERD_STATE_DIR"] == CONTAINERD["root"]
    unit = (ROOTFS / "usr/lib/systemd/system/flintlockd.service").read_text()
    assert "--state-dir=${FLINTLOCKD_STATE_DIR}" in unit


@pytest.mark.req("HI-066", "HI-081")
def test_containerd_confines_pods_and_reads_certs_d() -> None:
    assert CONTAINERD["version"] == 3
    assert CONTAINERD["plugins"]["io.containerd.cri.v1.runtime"]["enable_selinux"] is True
    registry = CONTAINERD["plugins"]["io.containerd.cri.v1.images"]["registry"]
    assert registry["config_path"] == IMAGE["CONTAINERD_HOSTS_DIR"]


@pytest.mark.req("HI-031")
def test_dnsmasq_serves_the_guest_bridge_alone() -> None:
    unit = (ROOTFS / "usr/lib/systemd/system/battery-dnsmasq.service").read_text()
    assert "--interface=${BATTERY_BRIDGE} --bind-interfaces" in unit
    assert "--dhcp-range=${GUEST_DHCP_FIRST},${GUEST_DHCP_LAST}" in unit
    assert "--conf-file=/dev/null" in unit  # nothing from the base image's dnsmasq.conf


@pytest.mark.req("HI-062")
def test_bootc_never_updates_itself() -> None:
    preset = _lines("usr/lib/systemd/system-preset/80-battery.preset")
    assert "disable bootc-fetch-apply-updates.timer" in preset
