"""The fake flintlockd's `MicroVM` service, ServerInfo included (TD-010; flintlock-api.md §1).

Semantics kept from flintlockd:
- CreateMicroVM needs `microvm` (INVALID_ARGUMENT otherwise), checks the spec, always makes a
  fresh uid and answers at once with the MicroVM PENDING; it becomes CREATED later;
- GetMicroVM and DeleteMicroVM need a uid (INVALID_ARGUMENT "invalid request"); Delete marks
  the MicroVM DELETING and it disappears later;
- ListMicroVMs filters on namespace and, when set, name; ListMicroVMsStream needs a namespace,
  ignores name, sends one message per MicroVM and ends (no watch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NoReturn

import grpc
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from batteryop.testing.fake_flintlock.faults import Faults
from batteryop.testing.fake_flintlock.vms import SpecInvalidError, VmNotFoundError, VmStore

log = logging.getLogger(__name__)

SERVICE_NAME = "microvm.services.api.v1alpha1.MicroVM"
MSG_INVALID_REQUEST = "invalid request"


@dataclass(frozen=True)
class ServerInfoConfig:
    """What ServerInfo reports; `enabled` False answers UNIMPLEMENTED (flintlockd < v0.15.0)."""

    version: str = "v0.16.0"
    exec_enabled: bool = True
    ssh_proxy_enabled: bool = False
    enabled: bool = True


async def _fail(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")


class MicroVMService(microvms_pb2_grpc.MicroVMServicer):
    """MicroVM over a VmStore, with the create faults."""

    def __init__(self, store: VmStore, faults: Faults, info: ServerInfoConfig) -> None:
        self._store = store
        self._faults = faults
        self._info = info

    async def CreateMicroVM(
        self, request: microvms_pb2.CreateMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.CreateMicroVMResponse:
        if not request.HasField("microvm"):
            await _fail(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_INVALID_REQUEST)
        delay = self._faults.create_delay
        store_first = self._faults.create_delay_store_first
        if delay > 0 and not store_first:
            await asyncio.sleep(delay)
        failure = self._faults.take_create_failure()
        if failure is not None:
            log.info("CreateMicroVM %s: injected failure %s", request.microvm.id, failure.code)
            await _fail(context, failure.code, failure.message)
        try:
            vm = self._store.create(request.microvm)
        except SpecInvalidError as err:
            await _fail(context, grpc.StatusCode.INVALID_ARGUMENT, str(err))
        log.info("CreateMicroVM %s/%s -> %s", vm.spec.namespace, vm.spec.id, vm.spec.uid)
        if delay > 0 and store_first:
            # The MicroVM exists already: a client that gives up meanwhile loses the answer.
            await asyncio.sleep(delay)
        return microvms_pb2.CreateMicroVMResponse(microvm=vm)

    async def DeleteMicroVM(
        self, request: microvms_pb2.DeleteMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        if not request.uid:
            await _fail(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_INVALID_REQUEST)
        try:
            self._store.delete(request.uid)
        except VmNotFoundError as err:
            await _fail(context, grpc.StatusCode.NOT_FOUND, str(err))
        log.info("DeleteMicroVM %s", request.uid)
        return empty_pb2.Empty()

    async def GetMicroVM(
        self, request: microvms_pb2.GetMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.GetMicroVMResponse:
        if not request.uid:
            await _fail(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_INVALID_REQUEST)
        try:
            vm = self._store.get(request.uid)
        except VmNotFoundError as err:
            await _fail(context, grpc.StatusCode.NOT_FOUND, str(err))
        return microvms_pb2.GetMicroVMResponse(microvm=vm)

    async def ListMicroVMs(
        self, request: microvms_pb2.ListMicroVMsRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.ListMicroVMsResponse:
        name = request.name if request.HasField("name") else None
        return microvms_pb2.ListMicroVMsResponse(microvm=self._store.list(request.namespace, name))

    async def ListMicroVMsStream(
        self, request: microvms_pb2.ListMicroVMsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[microvms_pb2.ListMessage]:
        if not request.namespace:
            await _fail(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_INVALID_REQUEST)
        for vm in self._store.list(request.namespace):
            yield microvms_pb2.ListMessage(microvm=vm)

    async def ServerInfo(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.ServerInfoResponse:
        if not self._info.enabled:
            await _fail(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                f"unknown method ServerInfo for service {SERVICE_NAME}",
            )
        return microvms_pb2.ServerInfoResponse(
            version=self._info.version,
            exec_enabled=self._info.exec_enabled,
            ssh_proxy_enabled=self._info.ssh_proxy_enabled,
        )
