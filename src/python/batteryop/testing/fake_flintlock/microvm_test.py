"""The fake's MicroVM service: create/get/list/delete semantics, errors, ServerInfo (TD-010)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_flintlock.testkit import ADDRESS, Client, make_spec

State = microvm_pb2.MicroVMStatus.MicroVMState


@pytest.mark.req("TD-010")
async def test_create_answers_pending_then_get_list_and_delete(client: Client) -> None:
    spec = make_spec("web", "")
    spec.labels["team"] = "a"
    spec.uid = "chosen-by-client"
    created = await client.microvm.CreateMicroVM(
        microvms_pb2.CreateMicroVMRequest(microvm=spec), timeout=10
    )
    vm = created.microvm
    assert vm.status.state == State.PENDING
    assert len(vm.spec.uid) == 26
    assert vm.spec.uid != "chosen-by-client"
    assert (vm.spec.namespace, vm.spec.vcpu, vm.spec.memory_in_mb) == ("default", 2, 1024)
    assert vm.spec.provider == "firecracker"
    assert not vm.spec.labels
    assert vm.status.vsock_path.endswith(f"/vm/default/web/{vm.spec.uid}/guest-agent.vsock")
    uid = vm.spec.uid

    got = await client.microvm.GetMicroVM(microvms_pb2.GetMicroVMRequest(uid=uid), timeout=10)
    assert got.microvm.status.state == State.CREATED
    assert got.microvm.status.network_interfaces["eth1"].host_device_name.startswith("fltap")
    assert got.microvm.version > vm.version

    other = await client.create(make_spec("db", "other"))
    listed = await client.microvm.ListMicroVMs(
        microvms_pb2.ListMicroVMsRequest(namespace="default"), timeout=10
    )
    assert [v.spec.uid for v in listed.microvm] == [uid]
    by_name = await client.microvm.ListMicroVMs(
        microvms_pb2.ListMicroVMsRequest(namespace="other", name="nope"), timeout=10
    )
    assert list(by_name.microvm) == []
    stream = client.microvm.ListMicroVMsStream(
        microvms_pb2.ListMicroVMsRequest(namespace="other", name="ignored"), timeout=10
    )
    assert [m.microvm.spec.uid async for m in stream] == [other]

    await client.microvm.DeleteMicroVM(microvms_pb2.DeleteMicroVMRequest(uid=uid), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.microvm.GetMicroVM(microvms_pb2.GetMicroVMRequest(uid=uid), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert [v.spec.uid for v in await client.host.list_vms()] == [other]


@pytest.mark.req("TD-010")
async def test_delete_shows_deleting_until_the_reconciler_removes_it() -> None:
    async with (
        FakeFlintlockd.start(address=ADDRESS, delete_delay=60) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        stub = microvms_pb2_grpc.MicroVMStub(channel)
        created = await stub.CreateMicroVM(
            microvms_pb2.CreateMicroVMRequest(microvm=make_spec()), timeout=10
        )
        uid = created.microvm.spec.uid
        await stub.DeleteMicroVM(microvms_pb2.DeleteMicroVMRequest(uid=uid), timeout=10)
        got = await stub.GetMicroVM(microvms_pb2.GetMicroVMRequest(uid=uid), timeout=10)
        assert got.microvm.status.state == State.DELETING
        assert got.microvm.spec.HasField("deleted_at")


Spec = microvm_pb2.MicroVMSpec
IFACE = microvm_pb2.NetworkInterface

# (the field the error names, how to spoil a good spec)
BAD_SPECS: list[tuple[str, Callable[[Spec], object]]] = [
    ("id", lambda s: setattr(s, "id", "")),
    ("id", lambda s: setattr(s, "id", "a/b")),
    ("namespace", lambda s: setattr(s, "namespace", "..")),
    ("vcpu", lambda s: setattr(s, "vcpu", 65)),
    ("memory_in_mb", lambda s: setattr(s, "memory_in_mb", 512)),
    ("memory_in_mb", lambda s: setattr(s, "memory_in_mb", 40000)),
    ("kernel.image", lambda s: s.ClearField("kernel")),
    ("kernel.filename", lambda s: s.kernel.ClearField("filename")),
    ("root_volume", lambda s: s.ClearField("root_volume")),
    ("root_volume.source", lambda s: setattr(s.root_volume.source, "virtiofs_source", "/srv")),
    ("interfaces", lambda s: s.ClearField("interfaces")),
    ("interfaces[0].device_id", lambda s: setattr(s.interfaces[0], "device_id", "eth1@x")),
    ("interfaces[0].type", lambda s: setattr(s.interfaces[0], "type", IFACE.MACVTAP)),
    ("provider", lambda s: setattr(s, "provider", "qemu")),
]


@pytest.mark.req("TD-010")
async def test_bad_specs_are_invalid_argument(client: Client) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.microvm.CreateMicroVM(microvms_pb2.CreateMicroVMRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for field, spoil in BAD_SPECS:
        spec = make_spec()
        spoil(spec)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.create(spec)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert f": {field}:" in (err.value.details() or ""), (field, err.value.details())
    assert await client.host.list_vms() == []


@pytest.mark.req("TD-010")
async def test_uid_rules(client: Client) -> None:
    stub = client.microvm
    for call, request in [
        (stub.GetMicroVM, microvms_pb2.GetMicroVMRequest(uid="")),
        (stub.DeleteMicroVM, microvms_pb2.DeleteMicroVMRequest(uid="")),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(request, timeout=10)
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid request",
        )
    for call, request in [
        (stub.GetMicroVM, microvms_pb2.GetMicroVMRequest(uid="01UNKNOWN")),
        (stub.DeleteMicroVM, microvms_pb2.DeleteMicroVMRequest(uid="01UNKNOWN")),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    async def drain_stream() -> None:
        async for _ in stub.ListMicroVMsStream(microvms_pb2.ListMicroVMsRequest(), timeout=10):
            pass

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await drain_stream()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    first, second = await client.create(), await client.create()
    assert first != second  # the same namespace and name twice: two MicroVMs


@pytest.mark.req("TD-010")
async def test_server_info_default_reports_exec_enabled(client: Client) -> None:
    info = await client.microvm.ServerInfo(empty_pb2.Empty(), timeout=10)
    assert (info.version, info.exec_enabled) == ("v0.16.0", True)


@pytest.mark.req("TD-010")
async def test_server_info_older_host_and_exec_disabled() -> None:
    async with (
        FakeFlintlockd.start(address=ADDRESS, version="v0.15.1", exec_enabled=False) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        info = await microvms_pb2_grpc.MicroVMStub(channel).ServerInfo(
            empty_pb2.Empty(), timeout=10
        )
        assert (info.version, info.exec_enabled) == ("v0.15.1", False)
    async with (
        FakeFlintlockd.start(address=ADDRESS, server_info=False) as host,
        grpc.aio.insecure_channel(host.target) as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await microvms_pb2_grpc.MicroVMStub(channel).ServerInfo(empty_pb2.Empty(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
