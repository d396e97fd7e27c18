"""Pants generates working gRPC code from src/protos: served with grpc.aio and called on loopback."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.protobuf.empty_pb2 import Empty

from battery_protos.poolmgr.v1alpha1 import lease_pb2, lease_pb2_grpc, types_pb2


class _RecordMethods(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        self.methods.append(handler_call_details.method)
        return await continuation(handler_call_details)


class _Lease(lease_pb2_grpc.LeaseServicer):
    async def ClaimVM(
        self, request: lease_pb2.ClaimVMRequest, context: Any
    ) -> lease_pb2.ClaimVMResponse:
        if request.pool.name == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"pool {request.pool.name} not found")
        return lease_pb2.ClaimVMResponse(
            lease_id=f"lease-for-{request.request_id}",
            vm_uid="vm-1",
            host=lease_pb2.HostInfo(name="host-a", address="127.0.0.2:9090"),
        )

    async def Heartbeat(
        self, request: lease_pb2.HeartbeatRequest, context: Any
    ) -> lease_pb2.HeartbeatResponse:
        ts = timestamp_pb2.Timestamp()
        ts.FromDatetime(datetime.datetime(2026, 11, 29, 12, 0, 30, tzinfo=datetime.UTC))
        return lease_pb2.HeartbeatResponse(expires_at=ts)

    async def ReleaseVM(self, request: lease_pb2.ReleaseVMRequest, context: Any) -> Empty:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this test")
        raise AssertionError("unreachable")

    async def ListLeases(
        self, request: lease_pb2.ListLeasesRequest, context: Any
    ) -> lease_pb2.ListLeasesResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this test")
        raise AssertionError("unreachable")


async def test_generated_service_is_served_and_called_on_loopback() -> None:
    recorder = _RecordMethods()
    server = grpc.aio.server(interceptors=[recorder])
    lease_pb2_grpc.add_LeaseServicer_to_server(_Lease(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = lease_pb2_grpc.LeaseStub(channel)
            pool = types_pb2.PoolRef(name="warm", namespace="ci")
            got = await stub.ClaimVM(lease_pb2.ClaimVMRequest(pool=pool, request_id="uid-1"))
            assert (got.lease_id, got.vm_uid, got.host.name) == (
                "lease-for-uid-1",
                "vm-1",
                "host-a",
            )

            beat = await stub.Heartbeat(lease_pb2.HeartbeatRequest(lease_id=got.lease_id))
            assert beat.expires_at.ToDatetime(tzinfo=datetime.UTC).second == 30

            missing = types_pb2.PoolRef(name="missing", namespace="ci")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ClaimVM(lease_pb2.ClaimVMRequest(pool=missing))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert err.value.details() == "pool missing not found"
    finally:
        await server.stop(grace=None)
    # Wire names are the real service's: the proto package, not our file path.
    assert recorder.methods[:2] == [
        "/poolmgr.v1alpha1.Lease/ClaimVM",
        "/poolmgr.v1alpha1.Lease/Heartbeat",
    ]


def test_request_id_is_field_two_of_claim_vm_request() -> None:
    # CL-060: ClaimVM carries the claim uid as request_id; the wire number must match battery's.
    field = lease_pb2.ClaimVMRequest.DESCRIPTOR.fields_by_name["request_id"]
    assert field.number == 2
    assert lease_pb2.DESCRIPTOR.package == "poolmgr.v1alpha1"
