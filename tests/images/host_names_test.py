"""The Host Image's names are written once (image.env) and agree with the Python side: the API
names, host.conf's defaults, and the Exec Agent's default paths; versions.env is complete for
both architectures."""

from __future__ import annotations

import re

import pytest
from images.hostfs import HOST, IMAGE_ENV, read_env

from batteryop import hostconf
from batteryop.api import names
from batteryop.exec_agent.host_checks import HostPaths

IMAGE = read_env(IMAGE_ENV)
VERSIONS = read_env(HOST / "versions.env")
COMPONENTS = (
    "CONTAINERD",
    "RUNC",
    "FIRECRACKER",
    "CLOUD_HYPERVISOR",
    "FLINTLOCK",
    "KUBERNETES_REPO_KEY",
)


@pytest.mark.req("HI-083")
def test_the_bridge_is_on_calicos_default_exclude_list() -> None:
    assert re.match(r"^virbr.*", IMAGE["BATTERY_BRIDGE"])
    assert len(IMAGE["BATTERY_BRIDGE"]) <= 15  # IFNAMSIZ - 1


def test_the_image_agrees_with_the_api_names_and_the_exec_agent() -> None:
    assert int(IMAGE["FLINTLOCKD_PORT"]) == names.FLINTLOCKD_PORT
    assert int(IMAGE["EXEC_AGENT_PORT"]) == names.EXEC_AGENT_PORT
    assert IMAGE["FLINTLOCKD_CERT_DIR"] == names.FLINTLOCKD_CERT_DIR
    defaults = HostPaths()
    assert IMAGE["BATTERY_NOT_READY_DIR"] == str(defaults.not_ready_dir)
    assert IMAGE["THIN_POOL_NAME"] == defaults.thin_pool
    # device-mapper names an LVM volume <group>-<volume>.
    assert IMAGE["THIN_POOL_NAME"] == f"{IMAGE['THIN_POOL_VG']}-{IMAGE['THIN_POOL_LV']}"
    assert (
        f'pool_name = "{IMAGE["THIN_POOL_NAME"]}"'
        in (HOST / "rootfs/etc/containerd/config.toml").read_text()
    )


@pytest.mark.req("HI-034")
def test_the_control_ports_cover_flintlockd_and_the_exec_agent() -> None:
    ports = hostconf.DEFAULTS["HOST_CONTROL_PORTS"].split(",")
    assert IMAGE["FLINTLOCKD_PORT"] in ports and IMAGE["EXEC_AGENT_PORT"] in ports


@pytest.mark.req("HI-009")
def test_the_ami_script_tags_with_the_api_names() -> None:
    script = (HOST / "publish-ami.sh").read_text()
    for var, name in (
        ("TAG_DIGEST", names.IMAGE_DIGEST_TAG),
        ("TAG_KUBERNETES", names.KUBERNETES_VERSION_TAG),
        ("TAG_HOST_IMAGE", names.HOST_IMAGE_TAG),
        ("TAG_ARCH", names.ARCHITECTURE_TAG),
    ):
        assert f"\n{var}={name}\n" in script


@pytest.mark.req("HI-003", "HI-004")
def test_every_download_is_pinned_for_both_architectures_or_marked_to_pin() -> None:
    for component in COMPONENTS:
        for arch in ("amd64", "arm64"):
            value = VERSIONS[f"{component}_SHA256_{arch}"]
            assert value == "PIN-ME" or re.fullmatch(r"[0-9a-f]{64}", value), (component, arch)
    assert re.fullmatch(r"sha256:([0-9a-f]{64}|PIN-ME)", VERSIONS["BASE_DIGEST"])


@pytest.mark.req("HI-003")
def test_the_pinned_versions_are_the_releases() -> None:
    assert VERSIONS["KUBERNETES_VERSION"] == "v1.36.3"
    assert VERSIONS["CONTAINERD_VERSION"] == "v2.2.9"
    assert VERSIONS["FLINTLOCK_VERSION"] == "v0.16.0"
    assert VERSIONS["FIRECRACKER_VERSION"] == "v1.16.1"
    assert VERSIONS["CLOUD_HYPERVISOR_VERSION"] == "v48.0"
    assert "/v1.36/" in VERSIONS["KUBERNETES_REPO"]
