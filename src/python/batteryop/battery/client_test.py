"""BatteryClient against a real grpc.aio server on loopback: requests, answers, deadlines,
token, TLS and the call observer."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from battery_protos.flintlock.types import microvm_pb2
from battery_protos.poolmgr.v1alpha1 import (
    hostadmin_pb2,
    lease_pb2,
    pooladmin_pb2,
    types_pb2,
)
from batteryop.battery import wire
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig, TLSConfig
from batteryop.battery.conftest import Answer, ClientFactory, RecordingObserver, Served, serve
from batteryop.battery.errors import (
    BatteryInternalError,
    BatteryNotFoundError,
    BatteryUnavailableError,
    InvalidArgumentError,
)
from batteryop.battery.models import (
    ClaimedVM,
    HookFailurePolicy,
    HostInfo,
    HostTLS,
    Initrd,
    InterfaceStatus,
    InterfaceType,
    Kernel,
    Lease,
    MicroVMTemplate,
    NetworkInterface,
    Pool,
    PoolRef,
    PoolSpec,
    PoolStatus,
    Replenishment,
    ReplenishmentType,
    StaticAddress,
    Volume,
    find_lease,
)
from batteryop.battery.protocol import BatteryAPI
from batteryop.tls import CertificateAuthority

REF = PoolRef(namespace="ci", name="runners")
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)

TEMPLATE = MicroVMTemplate(
    vcpu=2,
    memory_in_mb=2048,
    kernel=Kernel(
        image="ghcr.io/example/kernel:6.1",
        filename="boot/vmlinux",
        cmdline={"console": "ttyS0", "quiet": ""},
        add_network_config=True,
    ),
    root_volume=Volume(id="root", container_source="ghcr.io/example/ubuntu:24.04"),
    initrd=Initrd(image="ghcr.io/example/initrd:1"),
    additional_volumes=(
        Volume(
            id="data",
            virtiofs_source="/srv/data",
            read_only=True,
            mount_point="/data",
            partition_id="p1",
            size_in_mb=512,
        ),
    ),
    interfaces=(
        NetworkInterface(device_id="eth1", type=InterfaceType.TAP, bridge_name="virbr-battery"),
        NetworkInterface(
            device_id="eth2",
            guest_mac="02:00:00:00:00:01",
            address=StaticAddress("10.0.0.5/24", gateway="10.0.0.1", nameservers=("1.1.1.1",)),
        ),
    ),
    metadata={"user-data": "I2Nsb3VkLWNvbmZpZw=="},
    labels={"team": "ci"},
    provider="firecracker",
)

SPEC = PoolSpec(
    namespace="ci",
    name="runners",
    template=TEMPLATE,
    size=3,
    replenishment=Replenishment(ReplenishmentType.MIN_SIZE_THRESHOLD, min_size=1),
    hook_failure_policy=HookFailurePolicy.QUARANTINE,
    heartbeat_interval=timedelta(seconds=10),
    heartbeat_expiry_threshold=timedelta(seconds=30),
    flintlock_hosts=("h1", "h2"),
    create_commands=("true",),
    pre_lease_commands=("systemctl is-system-running --wait",),
)


def _ts(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def _echo_pool(request: Any) -> Answer:
    status = types_pb2.PoolStatus(available_count=1, leased_count=2, provisioning_count=3)
    return Answer(types_pb2.Pool(spec=request.spec, status=status))


@pytest.mark.req("DP-010")
async def test_calls_reach_battery_under_its_wire_method_names(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answer("GetHost", code=grpc.StatusCode.NOT_FOUND)
    served.battery.answer("ReleaseVM")
    with pytest.raises(BatteryNotFoundError):
        await battery.get_host("h1")
    await battery.release_vm("lease-1")
    assert served.battery.wire_methods == [
        "/poolmgr.v1alpha1.HostAdmin/GetHost",
        "/poolmgr.v1alpha1.Lease/ReleaseVM",
    ]


async def test_create_pool_sends_the_whole_spec_and_reads_it_back_unchanged(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answers["CreatePool"] = _echo_pool
    pool = await battery.create_pool(SPEC)
    assert pool == Pool(spec=SPEC, status=PoolStatus(available=1, leased=2, provisioning=3))
    sent = served.battery.requests("CreatePool")[0].request.spec
    assert (sent.namespace, sent.name, sent.size) == ("ci", "runners", 3)
    assert sent.replenishment_strategy.type == types_pb2.MIN_SIZE_THRESHOLD
    assert sent.replenishment_strategy.min_size == 1
    assert sent.hook_failure_policy == types_pb2.QUARANTINE
    assert sent.heartbeat_expiry_threshold.seconds == 30
    assert sent.microvm_template.interfaces[0].type == microvm_pb2.NetworkInterface.TAP
    assert sent.microvm_template.interfaces[0].overrides.bridge_name == "virbr-battery"
    assert sent.microvm_template.root_volume.source.container_source.endswith("ubuntu:24.04")
    assert not sent.microvm_template.HasField("uid")


async def test_update_pool_sends_the_spec(served: Served, battery: BatteryClient) -> None:
    served.battery.answers["UpdatePool"] = _echo_pool
    pool = await battery.update_pool(SPEC)
    assert pool.ref == REF
    assert served.battery.requests("UpdatePool")[0].request.spec.size == 3


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (replace(SPEC, heartbeat_interval=timedelta(0)), "heartbeat_interval"),
        (replace(SPEC, heartbeat_expiry_threshold=timedelta(0)), "heartbeat_expiry_threshold"),
    ],
)
async def test_a_spec_with_a_zero_duration_is_refused_before_calling(
    served: Served, battery: BatteryClient, spec: PoolSpec, field: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        await battery.create_pool(spec)
    with pytest.raises(InvalidArgumentError, match=field):
        await battery.update_pool(spec)
    assert served.battery.received == []


@pytest.mark.parametrize("force", [False, True])
async def test_delete_pool_sends_the_ref_and_force(
    served: Served, battery: BatteryClient, force: bool
) -> None:
    served.battery.answer("DeletePool")
    await battery.delete_pool(REF, force=force)
    request = served.battery.requests("DeletePool")[0].request
    assert (request.ref.namespace, request.ref.name, request.force) == ("ci", "runners", force)


async def test_get_and_list_pools(served: Served, battery: BatteryClient) -> None:
    pb = types_pb2.Pool(spec=types_pb2.PoolSpec(name="runners", namespace="ci"))
    served.battery.answer("GetPool", pb)
    served.battery.answer("ListPools", pooladmin_pb2.ListPoolsResponse(pools=[pb, pb]))
    pool = await battery.get_pool(REF)
    assert pool.ref == REF
    assert pool.status == PoolStatus()
    assert len(await battery.list_pools()) == 2
    await battery.list_pools("ci")
    first, second = served.battery.requests("ListPools")
    assert not first.request.HasField("namespace")
    assert second.request.namespace == "ci"


@pytest.mark.req("CL-060", "DP-013")
async def test_claim_vm_sends_the_request_id_and_reads_the_lease(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.answer(
        "ClaimVM",
        lease_pb2.ClaimVMResponse(
            lease_id="lease-1",
            vm_uid="vm-1",
            host=lease_pb2.HostInfo(name="h1", address="10.0.0.1:9090"),
            network_interfaces={
                "eth1": microvm_pb2.NetworkInterfaceStatus(
                    host_device_name="tap1", index=7, mac_address="aa:bb"
                )
            },
        ),
    )
    async with client_for(
        call_timeout=timedelta(seconds=5), claim_timeout=timedelta(seconds=90)
    ) as battery:
        claimed = await battery.claim_vm(REF, request_id="3f1c-uid")
    assert claimed == ClaimedVM(
        lease_id="lease-1",
        vm_uid="vm-1",
        host=HostInfo("h1", "10.0.0.1:9090"),
        network_interfaces={"eth1": InterfaceStatus("tap1", 7, "aa:bb")},
    )
    received = served.battery.requests("ClaimVM")[0]
    assert received.request.request_id == "3f1c-uid"
    assert (received.request.pool.namespace, received.request.pool.name) == ("ci", "runners")
    # DP-013: ClaimVM carries claim_timeout, not call_timeout.
    assert received.time_remaining is not None and 60 < received.time_remaining < 91


@pytest.mark.parametrize("request_id", ["", "x" * 256, "é" * 128])
async def test_claim_vm_refuses_a_request_id_battery_would_refuse(
    served: Served, battery: BatteryClient, request_id: str
) -> None:
    with pytest.raises(InvalidArgumentError, match="request_id") as caught:
        await battery.claim_vm(REF, request_id=request_id)
    assert caught.value.rpc == "ClaimVM"
    assert served.battery.received == []


@pytest.mark.req("DP-010")
async def test_every_other_unary_call_carries_call_timeout(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.answer("GetPool", types_pb2.Pool(spec=types_pb2.PoolSpec(name="p")))
    async with client_for(
        call_timeout=timedelta(seconds=4), claim_timeout=timedelta(minutes=5)
    ) as battery:
        await battery.get_pool(REF)
    remaining = served.battery.requests("GetPool")[0].time_remaining
    assert remaining is not None and 2 < remaining < 5


@pytest.mark.req("DP-010", "DP-013")
async def test_claim_timeout_is_separate_from_call_timeout(
    served: Served, client_for: ClientFactory
) -> None:
    answer = lease_pb2.ClaimVMResponse(lease_id="l", vm_uid="v")
    served.battery.answer("ClaimVM", answer, delay=0.4)  # battery running pre-lease hooks
    async with client_for(
        call_timeout=timedelta(milliseconds=100), claim_timeout=timedelta(seconds=5)
    ) as battery:
        assert (await battery.claim_vm(REF, request_id="u")).lease_id == "l"
    async with client_for(
        call_timeout=timedelta(seconds=5), claim_timeout=timedelta(milliseconds=100)
    ) as battery:
        with pytest.raises(BatteryUnavailableError) as caught:
            await battery.claim_vm(REF, request_id="u")
    assert (caught.value.rpc, caught.value.code) == ("ClaimVM", "DEADLINE_EXCEEDED")


async def test_heartbeat_returns_an_aware_expiry(served: Served, battery: BatteryClient) -> None:
    served.battery.answer("Heartbeat", lease_pb2.HeartbeatResponse(expires_at=_ts(T0)))
    expires = await battery.heartbeat("lease-1")
    assert expires == T0 and expires.tzinfo is not None
    assert served.battery.requests("Heartbeat")[0].request.lease_id == "lease-1"


async def test_list_leases_all_or_one_pool(served: Served, battery: BatteryClient) -> None:
    record = types_pb2.LeaseRecord(
        lease_id="lease-1",
        vm_uid="vm-1",
        pool_name="runners",
        pool_namespace="ci",
        claimed_at=_ts(T0),
        last_heartbeat_at=_ts(T0 + timedelta(seconds=5)),
        expires_at=_ts(T0 + timedelta(seconds=35)),
        request_id="uid-1",
    )
    served.battery.answer("ListLeases", lease_pb2.ListLeasesResponse(leases=[record]))
    assert await battery.list_leases() == [
        Lease(
            lease_id="lease-1",
            vm_uid="vm-1",
            pool=REF,
            claimed_at=T0,
            last_heartbeat_at=T0 + timedelta(seconds=5),
            expires_at=T0 + timedelta(seconds=35),
            request_id="uid-1",
        )
    ]
    await battery.list_leases(REF)
    everything, one = served.battery.requests("ListLeases")
    assert not everything.request.HasField("pool_ref")
    assert (one.request.pool_ref.namespace, one.request.pool_ref.name) == ("ci", "runners")


def _record(lease_id: str, *, no_expiry: bool = False) -> types_pb2.LeaseRecord:
    record = types_pb2.LeaseRecord(
        lease_id=lease_id,
        vm_uid=f"vm-{lease_id}",
        pool_name="runners",
        pool_namespace="ci",
        claimed_at=_ts(T0),
        last_heartbeat_at=_ts(T0),
        expires_at=_ts(T0 + timedelta(seconds=35)),
    )
    if no_expiry:
        record.ClearField("expires_at")
    return record


async def test_list_leases_finds_one_lease_without_converting_the_rest(
    served: Served, battery: BatteryClient
) -> None:
    """A Pool's answer is read one Lease at a time (1,000 converted at once cost 13 ms)."""
    records = [_record(f"lease-{i}") for i in range(1000)]
    served.battery.answer("ListLeases", lease_pb2.ListLeasesResponse(leases=records))
    leases = await battery.list_leases(REF)
    assert isinstance(leases, wire.LeaseList)
    found = find_lease(leases, "lease-700")
    assert found is not None and found.vm_uid == "vm-lease-700" and found.pool == REF
    assert find_lease(leases, "lease-missing") is None
    assert len(leases._leases) == 1, "only the Lease looked up was converted"
    assert len(leases) == 1000 and leases[-1].lease_id == "lease-999"
    assert [lease.lease_id for lease in leases[:2]] == ["lease-0", "lease-1"]


async def test_list_leases_with_an_unreadable_lease_fails_as_the_call(
    served: Served, battery: BatteryClient
) -> None:
    """Checked whole, though read lazily: one record without its expiry fails the answer."""
    records = [_record("lease-1"), _record("lease-2", no_expiry=True)]
    served.battery.answer("ListLeases", lease_pb2.ListLeasesResponse(leases=records))
    with pytest.raises(BatteryInternalError) as caught:
        await battery.list_leases(REF)
    assert caught.value.rpc == "ListLeases"
    assert "expires_at" in str(caught.value)


async def test_host_admin_calls(served: Served, battery: BatteryClient) -> None:
    host = types_pb2.Host(
        name="h1",
        address="10.0.0.1:9090",
        cordoned=True,
        cordoned_reason="node cordoned",
        cordoned_at=_ts(T0),
        tls=types_pb2.HostTLS(ca_file="/etc/ca.crt"),
    )
    status = hostadmin_pb2.HostStatus(host=host, vm_count=2, flintlock_version="v0.16.0")
    for rpc in ("CordonHost", "UncordonHost", "AddHost", "UpdateHost"):
        served.battery.answer(rpc, host)
    served.battery.answer("GetHost", status)
    served.battery.answer("ListHosts", hostadmin_pb2.ListHostsResponse(hosts=[status]))
    served.battery.answer("RemoveHost")

    cordoned = await battery.cordon_host("h1", reason="node cordoned")
    assert cordoned.cordoned and cordoned.cordoned_at == T0 and cordoned.updated_at is None
    assert cordoned.tls == HostTLS(ca_file="/etc/ca.crt")
    await battery.uncordon_host("h1")
    await battery.add_host("h1", "10.0.0.1:9090", tls=HostTLS(insecure=True), skip_validation=True)
    await battery.update_host("h1", "10.0.0.2:9090")
    assert (await battery.get_host("h1")).flintlock_version == "v0.16.0"
    assert [s.vm_count for s in await battery.list_hosts()] == [2]
    await battery.remove_host("h1")

    assert served.battery.requests("CordonHost")[0].request.reason == "node cordoned"
    added = served.battery.requests("AddHost")[0].request
    assert added.skip_validation and added.host.tls.insecure
    assert added.host.address == "10.0.0.1:9090"
    updated = served.battery.requests("UpdateHost")[0].request
    assert not updated.host.HasField("tls") and updated.host.address == "10.0.0.2:9090"
    assert served.battery.requests("RemoveHost")[0].request.name == "h1"


async def test_basic_token_reaches_battery_as_metadata(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.answer("ListHosts", hostadmin_pb2.ListHostsResponse())
    async with client_for(token="s3cret") as battery:
        await battery.list_hosts()
    async with client_for(token="abc", token_scheme="bearer") as battery:
        await battery.list_hosts()
    async with client_for() as battery:
        await battery.list_hosts()
    basic, bearer, none = (r.metadata for r in served.battery.requests("ListHosts"))
    assert basic["authorization"] == "basic " + base64.b64encode(b"s3cret").decode()
    assert bearer["authorization"] == "Bearer abc"
    assert "authorization" not in none


async def test_observer_sees_each_call_with_its_code_and_duration(
    served: Served, client_for: ClientFactory
) -> None:
    observer = RecordingObserver()
    served.battery.answer("Heartbeat", lease_pb2.HeartbeatResponse(expires_at=_ts(T0)))
    served.battery.answer("ReleaseVM", code=grpc.StatusCode.NOT_FOUND)
    async with client_for(observer=observer) as battery:
        await battery.heartbeat("l")
        with pytest.raises(BatteryNotFoundError):
            await battery.release_vm("l")
    assert [(rpc, code) for rpc, code, _ in observer.calls] == [
        ("Heartbeat", "OK"),
        ("ReleaseVM", "NOT_FOUND"),
    ]
    assert all(0 <= seconds < 5 for _, _, seconds in observer.calls)


async def test_a_failing_observer_does_not_fail_the_call(
    served: Served, client_for: ClientFactory
) -> None:
    class Broken:
        def on_call(self, rpc: str, code: str, seconds: float) -> None:
            raise RuntimeError("metrics backend down")

    served.battery.answer("ReleaseVM")
    async with client_for(observer=Broken()) as battery:
        await battery.release_vm("l")


def _as_api(client: BatteryClient) -> BatteryAPI:
    return client  # mypy proves the signatures match the protocol


def test_the_client_implements_the_protocol() -> None:
    assert issubclass(BatteryClient, BatteryAPI)


# --- TLS -------------------------------------------------------------------------------------


def _pki(tmp_path: Path) -> tuple[grpc.ServerCredentials, TLSConfig, TLSConfig]:
    """A server requiring client certs, a matching client TLS config, and a stranger's."""
    ca = CertificateAuthority.create("battery-test-ca")
    server = ca.issue("battery", hosts=["battery.test"], server=True)
    client = ca.issue("operator", client=True)
    ca.pair.write(tmp_path, "ca")
    client_crt, client_key = client.write(tmp_path, "client")
    credentials = grpc.ssl_server_credentials(
        [(server.key_pem, server.cert_pem)],
        root_certificates=ca.cert_pem,
        require_client_auth=True,
    )
    good = TLSConfig(
        ca_file=tmp_path / "ca.crt",
        cert_file=client_crt,
        key_file=client_key,
        server_name="battery.test",
    )
    other = CertificateAuthority.create("someone-else")
    other.pair.write(tmp_path / "other", "ca")
    stranger = TLSConfig(ca_file=tmp_path / "other" / "ca.crt", server_name="battery.test")
    return credentials, good, stranger


async def test_mutual_tls_with_a_server_name_override(tmp_path: Path) -> None:
    credentials, good, stranger = _pki(tmp_path)
    async with serve(credentials) as served:
        served.battery.answer("ListHosts", hostadmin_pb2.ListHostsResponse())
        async with BatteryClient.connect(served.config(tls=good, token="t")) as battery:
            assert await battery.list_hosts() == []
        assert "authorization" in served.battery.requests("ListHosts")[0].metadata

        # Without a client certificate, with the wrong CA, or without the name override
        # (the certificate names battery.test, not 127.0.0.1) no call gets through.
        for tls in (
            TLSConfig(ca_file=good.ca_file, server_name="battery.test"),
            stranger,
            TLSConfig(ca_file=good.ca_file, cert_file=good.cert_file, key_file=good.key_file),
        ):
            async with BatteryClient.connect(served.config(tls=tls)) as battery:
                with pytest.raises(BatteryUnavailableError):
                    await battery.list_hosts()
        assert len(served.battery.requests("ListHosts")) == 1


async def test_a_plaintext_client_cannot_talk_to_a_tls_battery(tmp_path: Path) -> None:
    credentials, _, _ = _pki(tmp_path)
    async with serve(credentials) as served:
        config = BatteryConfig(target=served.target)
        async with BatteryClient.connect(config) as battery:
            with pytest.raises(BatteryUnavailableError):
                await battery.list_hosts()
