"""Helpers for tests that talk to a fake flintlockd: a valid spec and stubs on one channel."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2_grpc
from battery_protos.flintlock.types import microvm_pb2
from batteryop.testing.fake_flintlock import FakeFlintlockd

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

    async def create(self, spec: microvm_pb2.MicroVMSpec | None = None) -> str:
        """Create a MicroVM and return its uid."""
        request = microvms_pb2.CreateMicroVMRequest(microvm=spec or make_spec())
        response = await self.microvm.CreateMicroVM(request, timeout=10)
        return response.microvm.spec.uid
