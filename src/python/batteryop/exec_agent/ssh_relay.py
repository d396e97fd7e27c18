"""One SSH proxy stream, caller to flintlockd's `MicroVMSSHProxy` and back (EA-130).

flintlock's SSH proxy is a raw byte stream to the guest agent's port 1025, which pipes it to
the guest's sshd (flintlock-api.md §8.4): sshd does the authentication, the PTY and SFTP. The
agent relays it with exactly the exec path's authorization, the steps of `relay` with the
`uid` message in place of the start:

1. authenticate the token and, beside it, read the first message within `open_timeout`
   (`relay.authenticated_first`: a refusal goes out only once that message is in);
2. the first message must decode and set `uid` (INVALID_ARGUMENT otherwise;
   DEADLINE_EXCEEDED if none comes);
3. authorize the caller for that MicroVM (the Holder's token bound to the claim's Secret,
   `auth.Authorizer.authorize`), then take a stream slot of the claim (`streams.ClaimStreams`,
   the exec streams' limits, which these streams share): from then on the claim's end (release,
   deletion, an expired lease) ends the stream at once with the refusal (`relay.Ending`, EA-106,
   EA-115), whether or not the caller reads;
4. within `open_timeout`: `GetMicroVM` on flintlockd and `SSHProxy` opened with the uid
   (`relay.open_upstream`, EA-021);
5. relay both ways:
   - caller to flintlockd: each `data` message as it came; the caller's half-close
     half-closes upstream (sshd sees EOF); a second `uid`, or a message that does not decode,
     ends the stream with INVALID_ARGUMENT;
   - flintlockd to caller: each response's data, checked to be an `SSHProxyResponse`
     (UNAVAILABLE otherwise); responses already waiting are joined up to
     `relay.COALESCE_BYTES`, none is held back for more (a keystroke's echo goes at once);
   - flintlockd ending its stream OK (the guest closed its side) ends the call OK; a failure
     keeps flintlockd's code (`relay.flintlockd_failure`).

Whatever ends the exchange, the upstream call is cancelled on the way out, so no connection
to the guest's sshd outlives its caller. Backpressure is the exec relay's: at most
`buffer_bytes` of responses (plus one) wait between flintlockd and a slow caller
(`relay.Outbox`), and flintlockd is not read while they do.

Requirements: EA-130 (and, through `auth` and `streams`, EA-010..EA-014, EA-105, EA-106,
EA-115, EA-116, EA-121).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Final

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.exec_agent.relay import (
    COALESCE_BYTES,
    INVALID_ARGUMENT,
    TIMED_OUT,
    UNAVAILABLE,
    Ending,
    Outbox,
    StreamRelay,
    authenticated_first,
    flintlockd_failure,
    open_upstream,
    to_flintlockd,
)

Request = microvmsshproxy_pb2.SSHProxyRequest
Response = microvmsshproxy_pb2.SSHProxyResponse

CLOSED: Final = None
"""The outbox's mark for flintlockd having ended its stream OK: the guest closed its side."""

Item = bytes | None
"""What waits in the outbox: a response's data, or `CLOSED`."""


def decode_request(data: bytes) -> Request | None:
    """An SSHProxyRequest from the wire, or None when the bytes are not one."""
    try:
        return Request.FromString(data)
    except DecodeError:
        return None


class SSHProxyRelay(StreamRelay):
    """Authorizes and relays `SSHProxy` streams to this Host's flintlockd (module doc)."""

    async def run(
        self,
        requests: AsyncIterator[Request | None],
        metadata: Iterable[tuple[str, str | bytes]] | None,
        peer: str | None = None,
    ) -> AsyncIterator[Response]:
        """Authorize, open and relay one SSH proxy stream (steps 1-5 of the module doc)."""
        caller, first = await authenticated_first(
            self._authorizer, requests, metadata, peer, self._open_timeout
        )
        try:
            uid = _valid_first(first, self._open_timeout)
        except BaseException:
            if caller.claim_read is not None:
                caller.claim_read.task.cancel()
            raise
        claim = await self._authorizer.authorize(caller, uid)
        outbox: Outbox[Item] = Outbox(self._buffer_bytes)
        ending: Ending[Item] = Ending(outbox, self._end_grace)
        stream = self._streams.admit(caller, claim, uid, end=ending.end)  # EA-105, EA-106
        ending.release = lambda: self._streams.release(stream)
        try:
            call = self._flintlockd.ssh_proxy()
            await open_upstream(
                self._flintlockd,
                call,
                Request(uid=uid),
                uid,
                ending,
                what="SSHProxy",
                timeout=self._open_timeout,
                observer=self._observer,
            )
            try:
                async for response in _relay(requests, call, outbox, ending):
                    yield response
            finally:
                call.cancel()  # a no-op once flintlockd ended the stream
        finally:
            ending.finish()


def _valid_first(first: object, open_timeout: float) -> str:
    """The uid the first message must set (step 2 of the module doc)."""
    if isinstance(first, Request):
        if first.WhichOneof("payload") != "uid" or not first.uid:
            raise RefusedError(INVALID_ARGUMENT, Check.REQUEST, "the first message must set uid")
        return first.uid
    if first is None:
        raise RefusedError(
            INVALID_ARGUMENT, Check.REQUEST, "the first message is not an SSHProxyRequest"
        )
    if first is TIMED_OUT:
        raise RefusedError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Check.REQUEST,
            f"no uid message within {open_timeout:g}s",
        )
    raise RefusedError(INVALID_ARGUMENT, Check.REQUEST, "the stream ended before a uid")


async def _relay(
    requests: AsyncIterator[Request | None],
    call: grpc.aio.StreamStreamCall,
    outbox: Outbox[Item],
    ending: Ending[Item],
) -> AsyncIterator[Response]:
    tasks = [
        asyncio.create_task(_from_flintlockd(call, outbox)),
        asyncio.create_task(
            to_flintlockd(
                requests,
                call,
                outbox,
                message="SSHProxyRequest",
                first="uid",
                again="a second uid",
                forwarded=frozenset({"data"}),
            )
        ),
    ]
    ending.tasks = tasks
    try:
        while True:
            item = await outbox.get()
            if isinstance(item, RefusedError):
                raise item
            if item is CLOSED:
                return
            chunks, size, closed = [item], len(item), False
            while size < COALESCE_BYTES and not outbox.empty():
                more = outbox.get_nowait()
                if isinstance(more, RefusedError):
                    raise more
                if more is CLOSED:
                    closed = True
                    break
                chunks.append(more)
                size += len(more)
            yield Response(data=b"".join(chunks))
            if closed:
                return
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _from_flintlockd(call: grpc.aio.StreamStreamCall, outbox: Outbox[Item]) -> None:
    """flintlockd's responses' data into the outbox, then `CLOSED` or how the stream failed."""
    try:
        while True:
            wire = await call.read()
            if wire is grpc.aio.EOF:  # the stream ended OK: the guest closed its side
                await outbox.put(CLOSED)
                return
            try:
                data = Response.FromString(wire).data
            except DecodeError:  # nothing after it can be trusted
                await outbox.put(
                    RefusedError(
                        UNAVAILABLE,
                        Check.FLINTLOCKD,
                        "flintlockd sent a message that is not an SSHProxyResponse",
                    )
                )
                return
            if data and not await outbox.put(data):
                return  # the stream failed
    except grpc.aio.AioRpcError as e:
        await outbox.put(flintlockd_failure(e.code(), e.details(), "the ssh stream failed"))
