from __future__ import annotations

import ast
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import batteryop.api as api
from batteryop.api import (
    _fields,
    claim,
    conditions,
    crds,
    errors,
    meta,
    names,
    pool,
    samples,
    times,
)
from batteryop.api.pool import HookFailurePolicy, InterfaceType, Pool, ReplenishmentType
from batteryop.battery import models as battery
from batteryop.battery import wire
from batteryop.operator.pools.battery_spec import (
    HOOK_FAILURE_POLICIES,
    INTERFACE_TYPES,
    REPLENISHMENT_TYPES,
    drained_spec,
    is_drained,
    to_battery_spec,
)


def full_pool() -> Pool:
    body = samples.sample_pool(namespace="team-a")
    template = body["spec"]["template"]
    template.update(
        provider="firecracker",
        initrd={"image": "ghcr.io/example/initrd:1", "filename": "initrd.img"},
        additionalVolumes=[
            {
                "id": "data",
                "containerSource": "ghcr.io/example/data:1",
                "readOnly": True,
                "mountPoint": "/data",
                "sizeInMb": 2048,
            },
            {"id": "share", "virtiofsSource": "/srv/share"},
        ],
        metadata={"user-data": "I2Nsb3VkLWNvbmZpZwo="},
        labels={"team": "a"},
    )
    template["kernel"]["addNetworkConfig"] = True
    template["rootVolume"].update(id="root", partitionId="a1b2", readOnly=False)
    template["interfaces"].append(
        {
            "deviceId": "eth2",
            "type": "Macvtap",
            "guestMac": "02:00:00:00:00:02",
            "address": {
                "address": "10.1.0.5/24",
                "gateway": "10.1.0.1",
                "nameservers": ["1.1.1.1"],
            },
            "overrides": {"bridgeName": "br1"},
        }
    )
    body["spec"]["replenishment"] = {"type": "MinSizeThreshold", "minSize": 2}
    body["spec"]["hooks"] = {"create": ["a", "b"], "preLease": ["c"], "failurePolicy": "Quarantine"}
    body["spec"]["lease"] = {"heartbeatInterval": "5s", "expiryThreshold": "1m"}
    return Pool.from_dict(body)


@pytest.mark.req("RS-010", "RS-011", "PO-010")
def test_every_pool_field_reaches_batterys_pool_spec() -> None:
    spec = to_battery_spec(full_pool(), ["host-b", "host-a", "host-b"])
    assert (spec.namespace, spec.name, spec.size) == ("team-a", "pool-sample", 4)
    assert spec.flintlock_hosts == ("host-a", "host-b")
    assert spec.replenishment == battery.Replenishment(
        battery.ReplenishmentType.MIN_SIZE_THRESHOLD, 2
    )
    assert spec.create_commands == ("a", "b")
    assert spec.pre_lease_commands == ("c",)
    assert spec.hook_failure_policy is battery.HookFailurePolicy.QUARANTINE
    assert spec.heartbeat_interval == timedelta(seconds=5)
    assert spec.heartbeat_expiry_threshold == timedelta(minutes=1)
    t = spec.template
    assert (t.vcpu, t.memory_in_mb, t.provider, t.namespace) == (2, 4096, "firecracker", "")
    assert t.kernel == battery.Kernel(
        image=samples.GUEST_KERNEL_IMAGE,
        filename="boot/vmlinux",
        cmdline={"console": "ttyS0", "reboot": "k"},
        add_network_config=True,
    )
    assert t.initrd == battery.Initrd("ghcr.io/example/initrd:1", "initrd.img")
    assert t.root_volume == battery.Volume(
        id="root", container_source=samples.GUEST_ROOTFS_IMAGE, partition_id="a1b2"
    )
    assert t.additional_volumes == (
        battery.Volume(
            id="data",
            container_source="ghcr.io/example/data:1",
            read_only=True,
            mount_point="/data",
            size_in_mb=2048,
        ),
        battery.Volume(id="share", virtiofs_source="/srv/share"),
    )
    assert t.interfaces == (
        battery.NetworkInterface("eth1", battery.InterfaceType.TAP),
        battery.NetworkInterface(
            "eth2",
            battery.InterfaceType.MACVTAP,
            guest_mac="02:00:00:00:00:02",
            address=battery.StaticAddress("10.1.0.5/24", "10.1.0.1", ("1.1.1.1",)),
            bridge_name="br1",
        ),
    )
    assert t.metadata == {"user-data": "I2Nsb3VkLWNvbmZpZwo="}
    assert t.labels == {"team": "a"}


def test_a_root_volume_without_id_is_named_root() -> None:
    # flintlockd refuses a volume without an id, and the demo Pool names none.
    spec = to_battery_spec(Pool.from_dict(samples.demo_pool(namespace="ns")), [])
    assert spec.template.root_volume.id == "root"
    assert spec.flintlock_hosts == ()


def test_every_enum_value_has_a_battery_value() -> None:
    assert set(REPLENISHMENT_TYPES) == set(ReplenishmentType)
    assert set(HOOK_FAILURE_POLICIES) == set(HookFailurePolicy)
    assert set(INTERFACE_TYPES) == set(InterfaceType)
    assert battery.ReplenishmentType.UNSPECIFIED not in REPLENISHMENT_TYPES.values()
    assert battery.HookFailurePolicy.UNSPECIFIED not in HOOK_FAILURE_POLICIES.values()


def test_the_mapped_spec_survives_batterys_wire_format() -> None:
    spec = to_battery_spec(full_pool(), ["host-a"])
    assert wire.pool_spec_from_pb(wire.pool_spec_to_pb(spec)) == spec


@pytest.mark.req("PO-042")
def test_the_drained_spec_keeps_nothing_warm_and_runs_nothing_new() -> None:
    spec = to_battery_spec(full_pool(), ["host-a"])
    drained = drained_spec(spec)
    assert drained.size == 0
    assert drained.replenishment == battery.Replenishment(
        battery.ReplenishmentType.MIN_SIZE_THRESHOLD, 1
    )
    assert drained.pre_lease_commands == ()
    assert drained.hook_failure_policy is battery.HookFailurePolicy.DELETE_AND_REPLACE
    assert (drained.template, drained.flintlock_hosts, drained.heartbeat_expiry_threshold) == (
        spec.template,
        spec.flintlock_hosts,
        spec.heartbeat_expiry_threshold,
    )
    assert not is_drained(spec)
    assert is_drained(drained)
    assert drained_spec(drained) == drained


def test_only_battery_spec_imports_the_rest_of_batteryop() -> None:
    # The client wheel ships batteryop.api without the battery client: every other module
    # of the package imports only the standard library, PyYAML and batteryop.api itself.
    imported = [api, _fields, claim, conditions, crds, errors, meta, names, pool, samples, times]
    sources = {Path(str(m.__file__)) for m in imported}
    # Outside a Pants sandbox, also any module added since this list was written.
    sources |= set(Path(str(api.__file__)).parent.glob("*.py"))
    allowed_third_party = {"yaml"}
    for source in sorted(sources):
        if source.name.endswith("_test.py") or source.name == "battery_spec.py":
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top == "batteryop":
                    assert module.startswith("batteryop.api"), f"{source.name} imports {module}"
                else:
                    assert (
                        top in sys.stdlib_module_names or top in allowed_third_party
                    ), f"{source.name} imports {module}"
