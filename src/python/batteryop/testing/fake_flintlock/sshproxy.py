"""The fake flintlockd's `MicroVMSSHProxy.SSHProxy` (TD-013; flintlock-api.md §8.4), served with
`--enable-ssh-proxy-api` as flintlockd serves it.

Stream semantics follow flintlockd:
- the first request must set `uid` (else INVALID_ARGUMENT "first message must set uid");
- the preconditions are exec's (`execution.ready_record`): an unknown uid is UNKNOWN, a MicroVM
  without `allow_guest_agent` or not CREATED is FAILED_PRECONDITION; `--agent-delay` makes the
  stream fail as UNKNOWN for that long after CREATED, like a guest agent that is not up yet;
- then every `data` request's bytes go to the guest's sshd as they are (a later `uid` is
  ignored), and every read from it, at most 32 KiB, is one response;
- the client's half-close (or a receive error) half-closes the connection towards the guest,
  and the stream goes on until the guest side ends; the guest side ending ends the RPC at once
  with OK; a cancelled RPC closes the connection.
Neither direction reads more than the other side takes: a request is read only once the last
one's bytes were written to the guest, and the guest is read only once the last response went.

The connection itself comes from the Host's `Guests` backend (`guests.py`): the sandbox's own
sshd (`sshd.py`), or the guest agent's SSH port (1025) in a QEMU guest (`qemu.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, NoReturn

import grpc

from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import (
    microvmsshproxy_pb2,
    microvmsshproxy_pb2_grpc,
)
from batteryop.testing.fake_flintlock.execution import ready_record
from batteryop.testing.fake_flintlock.vms import VmStore

if TYPE_CHECKING:
    from batteryop.testing.fake_flintlock.guests import Guests

log = logging.getLogger(__name__)

CHUNK_BYTES = 32 * 1024
MSG_BAD_FIRST = "first message must set uid"
MSG_SSH_UNREACHABLE = "dialing guest agent ssh port"
"""Our words for a guest agent that does not answer (flintlockd's were not read)."""

Request = microvmsshproxy_pb2.SSHProxyRequest
Response = microvmsshproxy_pb2.SSHProxyResponse


class SSHProxyService(microvmsshproxy_pb2_grpc.MicroVMSSHProxyServicer):
    """MicroVMSSHProxy over a VmStore and its Guests."""

    def __init__(self, store: VmStore, guests: Guests, *, agent_delay: float = 0.0) -> None:
        self._store = store
        self._guests = guests
        self._agent_delay = agent_delay

    async def SSHProxy(
        self, request_iterator: AsyncIterator[Request], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Response]:
        async def fail(code: grpc.StatusCode, message: str) -> NoReturn:
            await context.abort(code, message)
            raise AssertionError("context.abort returned")

        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("payload") != "uid" or not first.uid:
            await fail(grpc.StatusCode.INVALID_ARGUMENT, MSG_BAD_FIRST)
        record = await ready_record(self._store, first.uid, fail)
        if self._store.agent_up_for(record) < self._agent_delay:
            await fail(grpc.StatusCode.UNKNOWN, f"{MSG_SSH_UNREACHABLE}: connection refused")
        try:
            reader, writer = await self._guests.ssh(record)
        except ConnectionError as err:  # guests.GuestUnreachableError
            await fail(grpc.StatusCode.UNKNOWN, str(err))
        log.debug("SSHProxy %s: connected", record.uid)
        # A cancelled RPC closes the connection at once: gRPC may leave this generator
        # suspended at its `yield` until it is collected, so its `finally` is not relied on.
        context.add_done_callback(lambda _: writer.close())
        try:
            async for response in relay(requests, reader, writer):
                yield response
        except ConnectionError as err:
            await fail(grpc.StatusCode.UNKNOWN, f"reading from the guest's ssh port: {err}")
        finally:
            writer.close()


async def relay(
    requests: AsyncIterator[Request], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[Response]:
    """The responses of one stream whose first request was taken: `data` requests to writer
    (then its write side half-closed when the requests end), reads of reader back, until
    reader ends (the guest closed: the stream ends at once, whatever the client still sends)."""
    sending = asyncio.create_task(to_guest(requests, writer))
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            yield Response(data=chunk)
    finally:
        sending.cancel()


async def to_guest(requests: AsyncIterator[Request], writer: asyncio.StreamWriter) -> None:
    """Each `data` request's bytes to writer, one at a time once the last was taken; at the
    end of the requests (the client's half-close, or a receive error) a half-close."""
    try:
        async for request in requests:
            if request.WhichOneof("payload") == "data" and request.data:
                writer.write(request.data)
                await writer.drain()
    except (ConnectionError, OSError):
        return  # the guest went away: the reading side sees its end
    except Exception as err:  # - a receive error counts as the client's half-close
        log.debug("SSHProxy requests ended: %s", err)
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
