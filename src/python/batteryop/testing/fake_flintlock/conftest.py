"""Fixtures for the fake flintlockd's own tests: a running fake and stubs on a real channel."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2_grpc
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_flintlock.testkit import ADDRESS, Client


@pytest.fixture
async def fake() -> AsyncIterator[FakeFlintlockd]:
    async with FakeFlintlockd.start(address=ADDRESS) as host:
        yield host


@pytest.fixture
async def client(fake: FakeFlintlockd) -> AsyncIterator[Client]:
    async with grpc.aio.insecure_channel(fake.target) as channel:
        yield Client(
            host=fake,
            channel=channel,
            microvm=microvms_pb2_grpc.MicroVMStub(channel),
            exec=microvmexec_pb2_grpc.MicroVMExecStub(channel),
        )
