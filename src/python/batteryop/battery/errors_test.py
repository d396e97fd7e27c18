"""Every gRPC outcome becomes the right BatteryError, proven against a real loopback server."""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import grpc
import grpc.aio
import pytest

from battery_protos.poolmgr.v1alpha1 import lease_pb2
from batteryop.battery.client import BatteryClient
from batteryop.battery.config import BatteryConfig
from batteryop.battery.conftest import ClientFactory, Served
from batteryop.battery.errors import (
    IN_TRANSIT,
    AccessDeniedError,
    AlreadyExistsError,
    BatteryError,
    BatteryInternalError,
    BatteryNotFoundError,
    BatteryPoolExhaustedError,
    BatteryUnavailableError,
    ClaimAbortedError,
    InvalidArgumentError,
    PreconditionFailedError,
    UnimplementedError,
    from_rpc_error,
    rpc_boundary,
)
from batteryop.battery.models import HostTLS, PoolRef

REF = PoolRef(namespace="ci", name="runners")

CODE_TO_ERROR: list[tuple[grpc.StatusCode, type[BatteryError]]] = [
    (grpc.StatusCode.NOT_FOUND, BatteryNotFoundError),
    (grpc.StatusCode.ALREADY_EXISTS, AlreadyExistsError),
    (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError),
    (grpc.StatusCode.OUT_OF_RANGE, InvalidArgumentError),
    (grpc.StatusCode.FAILED_PRECONDITION, PreconditionFailedError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, BatteryPoolExhaustedError),
    (grpc.StatusCode.ABORTED, ClaimAbortedError),
    (grpc.StatusCode.UNIMPLEMENTED, UnimplementedError),
    (grpc.StatusCode.UNAUTHENTICATED, AccessDeniedError),
    (grpc.StatusCode.PERMISSION_DENIED, AccessDeniedError),
    (grpc.StatusCode.INTERNAL, BatteryInternalError),
    (grpc.StatusCode.UNKNOWN, BatteryInternalError),
    (grpc.StatusCode.DATA_LOSS, BatteryInternalError),
    (grpc.StatusCode.UNAVAILABLE, BatteryUnavailableError),
    (grpc.StatusCode.DEADLINE_EXCEEDED, BatteryUnavailableError),
    (grpc.StatusCode.CANCELLED, BatteryUnavailableError),
]

# Every unary method of the client, called with valid arguments: (rpc name, call).
CALLS: list[tuple[str, Callable[[BatteryClient], Awaitable[Any]]]] = [
    ("DeletePool", lambda b: b.delete_pool(REF, force=True)),
    ("GetPool", lambda b: b.get_pool(REF)),
    ("ListPools", lambda b: b.list_pools()),
    ("ClaimVM", lambda b: b.claim_vm(REF, request_id="uid-1")),
    ("Heartbeat", lambda b: b.heartbeat("lease-1")),
    ("ReleaseVM", lambda b: b.release_vm("lease-1")),
    ("ListLeases", lambda b: b.list_leases(REF)),
    ("CordonHost", lambda b: b.cordon_host("h1", reason="drain")),
    ("UncordonHost", lambda b: b.uncordon_host("h1")),
    ("ListHosts", lambda b: b.list_hosts()),
    ("AddHost", lambda b: b.add_host("h1", "10.0.0.1:9090", tls=HostTLS(insecure=True))),
    ("UpdateHost", lambda b: b.update_host("h1", "10.0.0.2:9090")),
    ("RemoveHost", lambda b: b.remove_host("h1")),
    ("GetHost", lambda b: b.get_host("h1")),
]


@pytest.mark.req("DP-011")
@pytest.mark.parametrize(("code", "error"), CODE_TO_ERROR, ids=[c.name for c, _ in CODE_TO_ERROR])
async def test_each_status_code_raises_its_error_with_rpc_code_and_message(
    served: Served, battery: BatteryClient, code: grpc.StatusCode, error: type[BatteryError]
) -> None:
    served.battery.answer("ClaimVM", code=code, details=f"battery says {code.name}")
    with pytest.raises(error) as caught:
        await battery.claim_vm(REF, request_id="uid-1")
    err = caught.value
    assert type(err) is error
    assert (err.rpc, err.code, err.message) == ("ClaimVM", code.name, f"battery says {code.name}")
    assert not isinstance(err, grpc.RpcError)
    assert isinstance(err.__cause__, grpc.aio.AioRpcError)  # chained with raise ... from
    assert "ClaimVM" in str(err) and code.name in str(err)


@pytest.mark.req("DP-011")
@pytest.mark.parametrize(("rpc", "call"), CALLS, ids=[rpc for rpc, _ in CALLS])
async def test_every_rpc_maps_its_failure_and_names_itself(
    served: Served,
    battery: BatteryClient,
    rpc: str,
    call: Callable[[BatteryClient], Awaitable[Any]],
) -> None:
    served.battery.answer(rpc, code=grpc.StatusCode.NOT_FOUND, details="gone")
    with pytest.raises(BatteryNotFoundError) as caught:
        await call(battery)
    assert caught.value.rpc == rpc


@pytest.mark.req("DP-011")
async def test_unavailable_error_says_the_outcome_is_unknown(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answer("ReleaseVM", code=grpc.StatusCode.UNAVAILABLE, details="cleanup pending")
    with pytest.raises(BatteryUnavailableError) as caught:
        await battery.release_vm("lease-1")
    assert IN_TRANSIT in str(caught.value)
    assert caught.value.message == "cleanup pending"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.req("DP-011")
async def test_no_listener_is_battery_unavailable() -> None:
    config = BatteryConfig(target=f"127.0.0.1:{_free_port()}")
    async with BatteryClient.connect(config) as battery:
        with pytest.raises(BatteryUnavailableError) as caught:
            await battery.get_pool(REF)
    assert (caught.value.rpc, caught.value.code) == ("GetPool", "UNAVAILABLE")


@pytest.mark.req("DP-011")
async def test_closing_the_client_under_a_call_is_battery_unavailable(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answer("ListLeases", lease_pb2.ListLeasesResponse(), delay=WAIT_LONG)
    call = asyncio.create_task(battery.list_leases())
    await served.battery.wait_for(lambda: bool(served.battery.requests("ListLeases")), "ListLeases")
    await battery.aclose()
    with pytest.raises(BatteryUnavailableError) as caught:
        await call
    assert caught.value.code == "CANCELLED"
    with pytest.raises(BatteryUnavailableError, match="closed"):
        await battery.list_leases()


WAIT_LONG = 30.0


@pytest.mark.req("DP-011")
async def test_the_callers_own_cancellation_is_not_mapped(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answer("GetPool", delay=WAIT_LONG)
    call = asyncio.create_task(battery.get_pool(REF))
    await served.battery.wait_for(lambda: bool(served.battery.requests("GetPool")), "GetPool")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


@pytest.mark.req("DP-011")
async def test_an_unreadable_answer_is_an_internal_error(
    served: Served, battery: BatteryClient
) -> None:
    served.battery.answer("ClaimVM", lease_pb2.ClaimVMResponse(vm_uid="vm-1"))  # no lease_id
    with pytest.raises(BatteryInternalError, match="lease_id") as caught:
        await battery.claim_vm(REF, request_id="uid-1")
    assert caught.value.code == "INTERNAL"


@pytest.mark.req("DP-010", "DP-011")
async def test_deadline_exceeded_is_unavailable_and_names_the_rpc(
    served: Served, client_for: ClientFactory
) -> None:
    served.battery.answer("Heartbeat", delay=WAIT_LONG)
    async with client_for(call_timeout=timedelta(milliseconds=200)) as battery:
        started = asyncio.get_running_loop().time()
        with pytest.raises(BatteryUnavailableError) as caught:
            await battery.heartbeat("lease-1")
        elapsed = asyncio.get_running_loop().time() - started
    assert (caught.value.rpc, caught.value.code) == ("Heartbeat", "DEADLINE_EXCEEDED")
    assert elapsed < 2.0


def test_errors_survive_pickling_with_their_fields() -> None:
    err = pickle.loads(
        pickle.dumps(BatteryPoolExhaustedError("ClaimVM", "RESOURCE_EXHAUSTED", "none"))
    )
    assert isinstance(err, BatteryPoolExhaustedError)
    assert (err.rpc, err.code, err.message) == ("ClaimVM", "RESOURCE_EXHAUSTED", "none")


def test_an_rpc_error_without_a_status_is_internal() -> None:
    err = from_rpc_error("GetPool", grpc.RpcError("odd"))
    assert isinstance(err, BatteryInternalError)
    assert err.code == "UNKNOWN"


def test_the_boundary_chains_and_never_lets_a_raw_rpc_error_out() -> None:
    raw = grpc.RpcError("odd")
    with pytest.raises(BatteryError) as caught, rpc_boundary("GetHost"):
        raise raw
    assert caught.value.__cause__ is raw
    assert caught.value.rpc == "GetHost"


async def test_wait_connected(served: Served, battery: BatteryClient) -> None:
    await battery.wait_connected(timedelta(seconds=5))
    async with BatteryClient.connect(BatteryConfig(target=f"127.0.0.1:{_free_port()}")) as gone:
        with pytest.raises(BatteryUnavailableError) as caught:
            await gone.wait_connected(timedelta(milliseconds=100))
    assert caught.value.code == "UNAVAILABLE"
