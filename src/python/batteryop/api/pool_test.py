from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batteryop.api import names, samples
from batteryop.api.conditions import PoolConditionType, PoolReason, set_condition
from batteryop.api.errors import MalformedObjectError
from batteryop.api.lease import pool_lease
from batteryop.api.meta import ObjectMeta
from batteryop.api.pool import (
    HookFailurePolicy,
    Hooks,
    Initrd,
    InterfaceType,
    Kernel,
    LeaseSettings,
    MicroVMTemplate,
    NetworkInterface,
    Pool,
    PoolSpec,
    PoolStatus,
    Replenishment,
    ReplenishmentType,
    StaticAddress,
    Volume,
)

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def test_the_sample_pool_reads_as_written() -> None:
    pool = Pool.from_dict(samples.sample_pool(namespace="ns"))
    assert (pool.namespace, pool.name) == ("ns", "pool-sample")
    spec = pool.spec
    assert spec.size == 4
    assert spec.node_selector == {"kubernetes.io/arch": "amd64"}
    assert spec.template.vcpu == 2 and spec.template.memory_in_mb == 4096
    assert spec.template.kernel == Kernel(
        image=samples.GUEST_KERNEL_IMAGE,
        filename="boot/vmlinux",
        cmdline={"console": "ttyS0", "reboot": "k"},
    )
    assert spec.template.root_volume == Volume(container_source=samples.GUEST_ROOTFS_IMAGE)
    assert spec.template.interfaces == (NetworkInterface("eth1", InterfaceType.TAP),)
    assert spec.hooks == Hooks(create=("true",))
    assert spec.lease == LeaseSettings(timedelta(seconds=10), timedelta(seconds=30))
    assert pool.status == PoolStatus()


def test_what_the_crd_defaults_reads_as_its_default() -> None:
    body = samples.demo_pool()
    spec = body["spec"]
    del spec["hooks"]
    spec["template"]["interfaces"] = [{"deviceId": "eth1"}]
    pool = Pool.from_dict(body)
    assert pool.spec.replenishment == Replenishment(ReplenishmentType.IMMEDIATE_ON_LEASE)
    assert pool.spec.hooks.failure_policy is HookFailurePolicy.DELETE_AND_REPLACE
    assert pool.spec.lease == LeaseSettings(timedelta(seconds=10), timedelta(seconds=30))
    assert pool.spec.template.interfaces[0].type is InterfaceType.MACVTAP


def test_rendering_spells_out_the_defaults() -> None:
    spec = Pool.from_dict(samples.demo_pool()).spec.to_dict()
    assert spec["replenishment"] == {"type": "ImmediateOnLease"}
    assert spec["hooks"] == {"create": ["uname -r"], "failurePolicy": "DeleteAndReplace"}
    assert spec["lease"] == {"heartbeatInterval": "10s", "expiryThreshold": "30s"}


@pytest.mark.parametrize("make", [samples.sample_pool, samples.demo_pool])
def test_a_fully_spelled_out_sample_renders_back_to_itself(make: Any) -> None:
    body = make(namespace="ns")
    pool = Pool.from_dict(body)
    rendered = pool.to_dict()
    # The demo leaves replenishment, lease and failurePolicy to the CRD's defaults.
    expected = copy.deepcopy(body)
    expected["spec"].setdefault("replenishment", {"type": "ImmediateOnLease"})
    expected["spec"].setdefault("lease", {"heartbeatInterval": "10s", "expiryThreshold": "30s"})
    expected["spec"]["hooks"].setdefault("failurePolicy", "DeleteAndReplace")
    assert rendered == expected


def test_status_reads_counts_and_conditions() -> None:
    conds = set_condition((), PoolConditionType.READY, True, PoolReason.AT_SIZE, "4 of 4", T0)
    body = samples.sample_pool()
    body["status"] = {
        "observedGeneration": 2,
        "available": 3,
        "leased": 1,
        "conditions": [c.to_dict() for c in conds],
    }
    status = Pool.from_dict(body).status
    assert status == PoolStatus(observed_generation=2, available=3, leased=1, conditions=conds)
    ready = status.condition(PoolConditionType.READY)
    assert ready is not None and ready.is_true


def test_status_is_rendered_only_when_set() -> None:
    pool = Pool.from_dict(samples.sample_pool())
    assert "status" not in pool.to_dict()
    body = Pool(pool.metadata, pool.spec, PoolStatus(available=1)).to_dict()
    assert body["status"] == {
        "available": 1,
        "leased": 0,
        "provisioning": 0,
        "quarantined": 0,
        "conditions": [],
    }


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec",), None, "spec"),
        (("spec", "template"), None, "spec.template"),
        (("spec", "template", "vcpu"), "2", "spec.template.vcpu"),
        (("spec", "template", "kernel", "filename"), None, "spec.template.kernel.filename"),
        (("spec", "hooks", "failurePolicy"), "Retry", "spec.hooks.failurePolicy"),
        (("spec", "lease", "expiryThreshold"), "soon", "spec.lease.expiryThreshold"),
        (("spec", "hooks", "create"), ["ok", 3], "spec.hooks.create[1]"),
    ],
)
def test_a_malformed_body_names_the_object_and_the_field(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    body = samples.sample_pool()
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    with pytest.raises(MalformedObjectError) as err:
        Pool.from_dict(body)
    assert err.value.path == field
    assert err.value.kind == names.POOL_KIND and err.value.name == "pool-sample"
    assert str(err.value).startswith("Pool 'pool-sample': " + field)


def test_an_interface_type_keeps_its_path_in_a_list() -> None:
    body = samples.sample_pool()
    body["spec"]["template"]["interfaces"].append({"deviceId": "eth2", "type": "Veth"})
    with pytest.raises(MalformedObjectError) as err:
        Pool.from_dict(body)
    assert err.value.path == "spec.template.interfaces[1].type"
    assert "Macvtap, Tap" in err.value.detail


# --- round trips -----------------------------------------------------------------------------

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
maybe_text = st.none() | text
str_map = st.dictionaries(text, st.text(max_size=8), max_size=3)
whole_seconds = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=0))

volumes = st.builds(
    Volume,
    id=maybe_text,
    container_source=maybe_text,
    virtiofs_source=maybe_text,
    read_only=st.booleans(),
    mount_point=maybe_text,
    partition_id=maybe_text,
    size_in_mb=st.none() | st.integers(1, 2**31 - 1),
)
interfaces = st.builds(
    NetworkInterface,
    device_id=text,
    type=st.sampled_from(InterfaceType),
    guest_mac=maybe_text,
    address=st.none()
    | st.builds(StaticAddress, text, maybe_text, st.lists(text, max_size=3).map(tuple)),
    bridge_name=maybe_text,
)
templates = st.builds(
    MicroVMTemplate,
    vcpu=st.integers(1, 64),
    memory_in_mb=st.integers(1024, 32768),
    kernel=st.builds(Kernel, text, text, str_map, st.booleans()),
    root_volume=volumes,
    interfaces=st.lists(interfaces, min_size=1, max_size=3).map(tuple),
    initrd=st.none() | st.builds(Initrd, text, maybe_text),
    additional_volumes=st.lists(volumes, max_size=2).map(tuple),
    metadata=str_map,
    labels=str_map,
    provider=st.none() | st.sampled_from(["firecracker", "cloudhypervisor"]),
)
positive = st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=30))
specs = st.builds(
    PoolSpec,
    template=templates,
    size=st.integers(0, 2**31 - 1),
    node_selector=str_map,
    replenishment=st.builds(
        Replenishment, st.sampled_from(ReplenishmentType), st.none() | st.integers(1, 100)
    ),
    hooks=st.builds(
        Hooks,
        st.lists(text, max_size=3).map(tuple),
        st.lists(text, max_size=3).map(tuple),
        st.sampled_from(HookFailurePolicy),
    ),
    lease=st.builds(LeaseSettings, positive, positive),
)
statuses = st.builds(
    PoolStatus,
    observed_generation=st.none() | st.integers(0, 2**40),
    available=st.integers(0, 100),
    leased=st.integers(0, 100),
    provisioning=st.integers(0, 100),
    quarantined=st.integers(0, 100),
    conditions=st.lists(
        st.tuples(st.sampled_from(PoolConditionType), st.booleans(), whole_seconds),
        max_size=2,
        unique_by=lambda c: c[0],
    ).map(
        lambda items: tuple(
            c
            for t, ok, when in items
            for c in set_condition((), t, ok, PoolReason.AT_SIZE, "m", when)
        )
    ),
)
metas = st.builds(
    ObjectMeta,
    name=text,
    namespace=text,
    uid=st.uuids().map(str),
    resource_version=st.integers(1, 10**9).map(str),
    generation=st.integers(1, 1000),
    creation_timestamp=whole_seconds,
    deletion_timestamp=st.none() | whole_seconds,
    finalizers=st.lists(text, max_size=2).map(tuple),
    labels=str_map,
    annotations=str_map,
)


@given(st.builds(Pool, metas, specs, statuses))
def test_a_pool_round_trips_through_its_body(pool: Pool) -> None:
    assert Pool.from_dict(pool.to_dict()) == pool


@given(specs)
def test_a_rendered_spec_renders_the_same_after_reading(spec: PoolSpec) -> None:
    rendered = spec.to_dict()
    assert PoolSpec.from_dict(rendered).to_dict() == rendered


@given(st.builds(Pool, metas, specs, statuses))
def test_the_lease_alone_reads_as_the_whole_pool_reads_it(pool: Pool) -> None:
    """`lease.pool_lease` (what the client reads of its Pool) agrees with `Pool.from_dict`."""
    assert pool_lease(pool.to_dict()) == pool.spec.lease


def test_the_lease_alone_takes_the_crds_defaults_and_names_a_bad_field() -> None:
    assert pool_lease({"spec": {}}) == LeaseSettings()
    with pytest.raises(MalformedObjectError, match=r"spec\.lease\.heartbeatInterval"):
        pool_lease({"spec": {"lease": {"heartbeatInterval": "soon"}}})
