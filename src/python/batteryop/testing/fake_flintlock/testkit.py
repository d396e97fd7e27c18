"""Helpers for tests that talk to a fake flintlockd: a valid spec and stubs on one channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockd

Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse

ADDRESS = "127.0.0.2"
"""The loopback address the fake's own tests use (its own, so it cannot clash with others)."""


def make_spec(
    name: str = "vm", namespace: str = "ns", *, allow_guest_agent: bool = True
) -> microvm_pb2.MicroVMSpec:
    """A spec flintlockd accepts: kernel, root volume and one TAP interface."""
    return microvm_pb2.MicroVMSpec(
        id=name,
        namespace=namespace,
        kernel=microvm_pb2.Kernel(image="ghcr.io/example/kernel:6.1", filename="boot/vmlinux"),
        root_volume=microvm_pb2.Volume(
            id="root", source=microvm_pb2.VolumeSource(container_source="ghcr.io/example/root:1")
        ),
        interfaces=[
            microvm_pb2.NetworkInterface(device_id="eth1", type=microvm_pb2.NetworkInterface.TAP)
        ],
        allow_guest_agent=allow_guest_agent,
    )


@dataclass
class Client:
    """Stubs for one fake Host on one real channel."""

    host: FakeFlintlockd
    channel: grpc.aio.Channel
    microvm: microvms_pb2_grpc.MicroVMStub
    exec: microvmexec_pb2_grpc.MicroVMExecStub
    shared_uid: str | None = None
    """A MicroVM that tests of a module share (a booted QEMU guest), when there is one."""

    async def create(self, spec: microvm_pb2.MicroVMSpec | None = None) -> str:
        """Create a MicroVM and return its uid."""
        request = microvms_pb2.CreateMicroVMRequest(microvm=spec or make_spec())
        response = await self.microvm.CreateMicroVM(request, timeout=10)
        return response.microvm.spec.uid

    async def create_ready(self, spec: microvm_pb2.MicroVMSpec, timeout: float = 900) -> str:
        """Create a MicroVM and return its uid once it is CREATED (a QEMU guest's agent
        answered). flintlock has no watch, so GetMicroVM is polled, as battery does."""
        uid = await self.create(spec)
        async with asyncio.timeout(timeout):
            while True:
                request = microvms_pb2.GetMicroVMRequest(uid=uid)
                try:
                    got = (await self.microvm.GetMicroVM(request, timeout=10)).microvm
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    # The fake dropped it (a guest that could not start): say why.
                    raise AssertionError(
                        f"MicroVM {uid} is gone before CREATED; the fake's log ends:\n"
                        + self.host.log_tail()
                    ) from err
                if got.status.state == microvm_pb2.MicroVMStatus.CREATED:
                    return uid
                await asyncio.sleep(0.5)

    async def delete(self, uid: str) -> None:
        await self.microvm.DeleteMicroVM(microvms_pb2.DeleteMicroVMRequest(uid=uid), timeout=10)


async def requests_for(
    start: microvmexec_pb2.ExecStart, stdin: Sequence[bytes] = ()
) -> AsyncIterator[Request]:
    """start, then (only when start.has_stdin) the stdin chunks and stdin_eof.

    Nothing more is written: a grpc.aio client that writes after the server ended the stream
    can turn the server's status into INTERNAL ("Internal error from Core").
    """
    yield Request(start=start)
    if start.has_stdin:
        for chunk in stdin:
            yield Request(stdin=chunk)
        yield Request(stdin_eof=True)


async def run(
    client: Client, start: microvmexec_pb2.ExecStart, stdin: Sequence[bytes] = ()
) -> list[Response]:
    """Every response of one exec stream (raises the RPC error if it fails)."""
    call = client.exec.ExecCommand(requests_for(start, stdin), timeout=20)
    return [response async for response in call]


def joined(responses: Sequence[Response], kind: str) -> bytes:
    return b"".join(getattr(r, kind) for r in responses if r.WhichOneof("payload") == kind)


def assert_exit_last(responses: Sequence[Response], code: int) -> None:
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds.count("exit_code") == 1, kinds
    assert kinds[-1] == "exit_code", kinds
    assert responses[-1].exit_code == code
