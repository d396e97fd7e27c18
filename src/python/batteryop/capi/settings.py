"""A Host pool's settings (HP-002): read from the `host-pool` ConfigMap that kustomize also
reads, checked, and completed with defaults. Every refusal names the setting and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batteryop import hostconf
from batteryop.api import names

SETTINGS_CONFIGMAP = "host-pool"
"""The name of the settings ConfigMap in each pool folder; the Component's replacements read it."""

MAX_UNHEALTHY_PERCENT = 40
"""Above this share of unhealthy Machines, replacing Hosts is no remedy (HP-005)."""

MIN_ROOT_VOLUME_GIB = 50

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_AWS_ID = r"-[0-9a-f]{8}(?:[0-9a-f]{9})?"
_AMI = re.compile(r"ami" + _AWS_ID)
_SUBNET = re.compile(r"subnet" + _AWS_ID)
_SECURITY_GROUP = re.compile(r"sg" + _AWS_ID)
_VERSION = re.compile(r"v1\.\d+\.\d+")
_INSTANCE_TYPE = re.compile(
    r"(?P<cls>[a-z]+)(?P<gen>\d+)(?P<attrs>[a-z-]*)\.(?P<size>metal(?:-\d+xl)?|[a-z0-9]+)"
)
# Families whose every size has instance-store disks, whatever their attribute letters say.
_STORAGE_CLASSES = {"i", "im", "is", "d", "h"}


class SettingsError(ValueError):
    """A Host pool setting breaks a rule; the message names the setting and the rule."""

    def __init__(self, setting: str, rule: str) -> None:
        super().__init__(f"host pool setting {setting}: {rule}")
        self.setting = setting
        self.rule = rule


@dataclass(frozen=True)
class InstanceType:
    """What an EC2 instance type's name says about it."""

    name: str
    architecture: str
    metal: bool
    instance_store: bool

    @classmethod
    def parse(cls, name: str) -> InstanceType:
        match = _INSTANCE_TYPE.fullmatch(name)
        if match is None:
            raise SettingsError("instanceType", f"{name!r} is not an EC2 instance type name")
        attrs = match["attrs"]
        arm = "g" in attrs or match["cls"] == "a"
        return cls(
            name=name,
            architecture="arm64" if arm else "amd64",
            metal=match["size"].startswith("metal"),
            instance_store="d" in attrs or match["cls"] in _STORAGE_CLASSES,
        )


@dataclass(frozen=True)
class HostPoolSettings:
    """Checked settings of one Host pool, each as the ConfigMap spells it."""

    values: Mapping[str, str]
    instance_type: InstanceType
    security_groups: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.values["name"]


def from_configmap(body: Mapping[str, Any], *, default_version: str) -> HostPoolSettings:
    """Check the settings ConfigMap and fill in the defaults (`default_version` is the
    Kubernetes version the templates carry, the one the Host Image pins: HP-003)."""
    if (
        body.get("kind") != "ConfigMap"
        or body.get("metadata", {}).get("name") != SETTINGS_CONFIGMAP
    ):
        raise SettingsError("kind", f"the settings are a ConfigMap named {SETTINGS_CONFIGMAP!r}")
    data = {str(k): str(v) for k, v in (body.get("data") or {}).items()}
    defaults = {
        "kubernetesVersion": default_version,
        "rootVolumeGiB": "100",
        "unhealthySeconds": "600",
        "maxUnhealthy": f"{MAX_UNHEALTHY_PERCENT}%",
        "nodeDrainTimeoutSeconds": str(names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS),
    }
    values = {**defaults, **data}
    known = {*defaults, "name", "clusterName", "replicas", "instanceType", "amiID", "subnetID"}
    known |= {"additionalSecurityGroups", "host.conf"}
    for key in values:
        if key not in known:
            raise SettingsError(
                key, f"is not a Host pool setting (known: {', '.join(sorted(known))})"
            )

    def required(key: str) -> str:
        value = values.get(key, "").strip()
        if not value:
            raise SettingsError(key, "is required")
        return value

    for key in ("name", "clusterName"):
        if not _DNS_LABEL.fullmatch(required(key)):
            raise SettingsError(key, "must be a DNS label (lower case, digits, '-', at most 63)")
    _whole(values, "replicas", required("replicas"), minimum=0)
    instance = InstanceType.parse(required("instanceType"))
    if not instance.metal:  # Firecracker needs KVM, which only bare metal gives every family.
        raise SettingsError("instanceType", f"{instance.name} is not a bare-metal (.metal) size")
    conf_text = required("host.conf")
    try:
        given = {key: value for _, key, value in hostconf.entries(conf_text)}
        hostconf.check(given)  # HP-010: a key the Host Image does not know is refused here
    except hostconf.HostConfError as err:
        raise SettingsError("host.conf", str(err)) from None
    for key in ("FLINTLOCKD_CLIENT_CIDRS", "PROTECTED_CIDRS"):  # HP-011: always set
        if key not in given:
            raise SettingsError("host.conf", f"must set {key}")
    if not given["FLINTLOCKD_CLIENT_CIDRS"]:
        raise SettingsError(
            "host.conf", "FLINTLOCKD_CLIENT_CIDRS is empty: battery could not reach the Hosts"
        )
    if not instance.instance_store and not given.get("THIN_POOL_DEVICE"):
        raise SettingsError(
            "instanceType",
            f"{instance.name} has no instance store: choose a size with one or set "
            "THIN_POOL_DEVICE in host.conf",
        )
    values["host.conf"] = hostconf.render(given)
    if not _AMI.fullmatch(required("amiID")):
        raise SettingsError("amiID", "must be an AMI id (ami- and 8 or 17 hex digits)")
    if not _SUBNET.fullmatch(required("subnetID")):
        raise SettingsError("subnetID", "must be a subnet id (subnet- and 8 or 17 hex digits)")
    groups = tuple(g.strip() for g in required("additionalSecurityGroups").split(","))
    for group in groups:
        if not _SECURITY_GROUP.fullmatch(group):
            raise SettingsError("additionalSecurityGroups", f"{group!r} is not a security group id")
    values["additionalSecurityGroups"] = ",".join(groups)
    if not _VERSION.fullmatch(required("kubernetesVersion")):
        raise SettingsError("kubernetesVersion", "must read v1.<minor>.<patch>")
    _whole(values, "rootVolumeGiB", values["rootVolumeGiB"], minimum=MIN_ROOT_VOLUME_GIB)
    drain = names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS
    _whole(
        values,
        "nodeDrainTimeoutSeconds",
        values["nodeDrainTimeoutSeconds"],
        minimum=drain,
        why=f"the Exec Agent's drain timeout ({drain} s), so Bound claims end first (HP-004)",
    )
    _whole(values, "unhealthySeconds", values["unhealthySeconds"], minimum=60)
    unhealthy = values["maxUnhealthy"]
    if not (unhealthy.endswith("%") and unhealthy[:-1].isdigit()):
        raise SettingsError("maxUnhealthy", "must be a percentage such as 40%")
    if int(unhealthy[:-1]) > MAX_UNHEALTHY_PERCENT:
        raise SettingsError(
            "maxUnhealthy",
            f"must be at most {MAX_UNHEALTHY_PERCENT}%: beyond that the cause is not the Hosts",
        )
    return HostPoolSettings(values=values, instance_type=instance, security_groups=groups)


def _whole(values: Mapping[str, str], key: str, value: str, *, minimum: int, why: str = "") -> None:
    if not value.isdigit():
        raise SettingsError(key, "must be a whole number")
    if int(value) < minimum:
        raise SettingsError(key, f"must be at least {why or minimum}")
