"""A Host pool's settings: what is refused, with the setting named, and what is filled in."""

from __future__ import annotations

from typing import Any

import pytest

from batteryop.api import names
from batteryop.capi.settings import InstanceType, SettingsError, from_configmap

VERSION = "v1.36.3"
GOOD = {
    "name": "hosts-a",
    "clusterName": "battery",
    "replicas": "2",
    "instanceType": "m6id.metal",
    "amiID": "ami-0123456789abcdef0",
    "subnetID": "subnet-0123456789abcdef0",
    "additionalSecurityGroups": "sg-0123456789abcdef0, sg-01234567",
    "host.conf": "FLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16\nPROTECTED_CIDRS=10.0.0.0/16\n",
}


def body(**changes: Any) -> dict[str, Any]:
    data = {k: v for k, v in {**GOOD, **changes}.items() if v is not None}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "host-pool"},
        "data": data,
    }


def refused(**changes: Any) -> SettingsError:
    with pytest.raises(SettingsError) as raised:
        from_configmap(body(**changes), default_version=VERSION)
    return raised.value


@pytest.mark.req("HP-002", "HP-003")
def test_good_settings_are_completed_with_defaults() -> None:
    settings = from_configmap(body(), default_version=VERSION)
    assert settings.values["kubernetesVersion"] == VERSION
    assert settings.values["nodeDrainTimeoutSeconds"] == str(names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS)
    assert settings.values["maxUnhealthy"] == "40%"
    assert settings.security_groups == ("sg-0123456789abcdef0", "sg-01234567")
    # host.conf in the Host Image's key order.
    assert settings.values["host.conf"] == (
        "PROTECTED_CIDRS=10.0.0.0/16\nFLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16\n"
    )


@pytest.mark.parametrize(
    ("changes", "setting", "rule"),
    [
        ({"amiID": None}, "amiID", "is required"),
        ({"amiID": "ami-xyz"}, "amiID", "AMI id"),
        ({"instanceType": "m6id.32xlarge"}, "instanceType", "not a bare-metal"),
        ({"instanceType": "m6i.metal"}, "instanceType", "no instance store"),
        ({"subnetID": "subnet-1"}, "subnetID", "subnet id"),
        (
            {"additionalSecurityGroups": "sg-0123456789abcdef0,default"},
            "additionalSecurityGroups",
            "'default'",
        ),
        ({"name": "Hosts_A"}, "name", "DNS label"),
        ({"replicas": "-1"}, "replicas", "whole number"),
        ({"kubernetesVersion": "1.36"}, "kubernetesVersion", "v1.<minor>.<patch>"),
        ({"rootVolumeGiB": "20"}, "rootVolumeGiB", "at least 50"),
        ({"unhealthySeconds": "5"}, "unhealthySeconds", "at least 60"),
        ({"region": "eu-west-1"}, "region", "not a Host pool setting"),
        ({"host.conf": None}, "host.conf", "is required"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(
    changes: dict[str, Any], setting: str, rule: str
) -> None:
    error = refused(**changes)
    assert error.setting == setting
    assert rule in str(error)
    assert str(error).startswith(f"host pool setting {setting}: ")


@pytest.mark.req("HP-004")
def test_a_drain_shorter_than_the_exec_agents_is_refused() -> None:
    drain = names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS
    assert "Exec Agent's drain timeout" in str(refused(nodeDrainTimeoutSeconds=str(drain - 1)))
    from_configmap(body(nodeDrainTimeoutSeconds=str(drain)), default_version=VERSION)


@pytest.mark.req("HP-005")
def test_remediation_above_forty_percent_is_refused() -> None:
    assert "at most 40%" in str(refused(maxUnhealthy="41%"))
    assert "percentage" in str(refused(maxUnhealthy="40"))
    from_configmap(body(maxUnhealthy="20%"), default_version=VERSION)


@pytest.mark.req("HP-010")
def test_a_host_conf_key_the_host_image_does_not_know_is_refused_at_render() -> None:
    error = refused(**{"host.conf": GOOD["host.conf"] + "GUEST_SUBNETS=10.9.0.0/16\n"})
    assert error.setting == "host.conf"
    assert "GUEST_SUBNETS: is not a key of host.conf" in str(error)
    bad_value = refused(**{"host.conf": GOOD["host.conf"] + "GUEST_SUBNET=10.9.0.0/30\n"})
    assert "GUEST_SUBNET: must be a /29 or larger" in str(bad_value)


@pytest.mark.req("HP-011")
def test_host_conf_must_set_who_reaches_flintlockd_and_what_guests_may_not_reach() -> None:
    assert "must set PROTECTED_CIDRS" in str(
        refused(**{"host.conf": "FLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16\n"})
    )
    assert "must set FLINTLOCKD_CLIENT_CIDRS" in str(refused(**{"host.conf": "PROTECTED_CIDRS=\n"}))
    assert "FLINTLOCKD_CLIENT_CIDRS is empty" in str(
        refused(**{"host.conf": "PROTECTED_CIDRS=\nFLINTLOCKD_CLIENT_CIDRS=\n"})
    )


def test_a_metal_size_without_instance_store_needs_a_thin_pool_device() -> None:
    conf = GOOD["host.conf"] + "THIN_POOL_DEVICE=/dev/nvme1n1\n"
    settings = from_configmap(
        body(instanceType="m6i.metal", **{"host.conf": conf}), default_version=VERSION
    )
    assert settings.instance_type.instance_store is False


@pytest.mark.req("HP-100")
@pytest.mark.parametrize(
    ("name", "architecture", "metal", "store"),
    [
        ("m6id.metal", "amd64", True, True),
        ("c7gd.metal", "arm64", True, True),
        ("m7g.metal", "arm64", True, False),
        ("i4i.metal", "amd64", True, True),
        ("c7gd.16xlarge", "arm64", False, True),
        ("m5zn.metal", "amd64", True, False),
    ],
)
def test_instance_type_names_say_architecture_metal_and_instance_store(
    name: str, architecture: str, metal: bool, store: bool
) -> None:
    assert InstanceType.parse(name) == InstanceType(name, architecture, metal, store)


def test_the_settings_are_the_host_pool_configmap() -> None:
    with pytest.raises(SettingsError, match="ConfigMap named 'host-pool'"):
        from_configmap({**body(), "kind": "Secret"}, default_version=VERSION)
