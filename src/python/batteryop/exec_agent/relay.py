"""One exec stream, caller to flintlockd and back (EA-020, EA-021, EA-106, EA-115, EA-116).

`ExecRelay.run` takes the caller's request stream and metadata and yields the responses to send
back; it ends either by returning after the exit-status frame or by raising `RefusedError`, whose
code and message become the call's status. In order:

1. authenticate the token (`auth.Authorizer.authenticate`) and, beside it, read the first
   message within `open_timeout`. A failed authentication is the call's status, but only once
   that first message is in (or the stream ended, or the timeout passed): a refusal sent while
   the caller is still writing its start makes grpc's client fail the write and report INTERNAL
   instead of the refusal (grpc.aio replaces the call's status with "Internal error from Core"
   when a send fails), so waiting for it makes the caller's status deterministic. Nothing of the
   message is looked at for a caller that did not authenticate;
2. the first message must decode, be a `start`, name a MicroVM uid and a command
   (INVALID_ARGUMENT otherwise; DEADLINE_EXCEEDED if none comes);
3. authorize the caller for that uid (`auth.Authorizer.authorize`): nothing reaches flintlockd
   before this passes; then take a stream slot for the claim (`streams.ClaimStreams.admit`,
   RESOURCE_EXHAUSTED when none is free, EA-105), which from now on ends the stream with a
   refusal as soon as the claim no longer allows it, or its lease expires (EA-106): at once,
   from outside the handler, whether or not the caller reads (`Ending`, EA-115);
4. within `open_timeout` (EA-021), and together: `GetMicroVM` on flintlockd (it answers for the
   MicroVM), and `ExecCommand` opened with the start. Timeout: UNAVAILABLE; flintlockd's own
   refusal keeps its code;
5. relay both ways until flintlockd reports the exit (EA-020):
   - caller to flintlockd: `stdin` and `stdin_eof` messages when the start said `has_stdin`
     (flintlockd reads nothing else, so nothing else is sent on); the caller's half-close
     half-closes upstream; a second `start`, or a message that does not decode, ends the
     exchange with INVALID_ARGUMENT;
   - flintlockd to caller: every response, in order, as the bytes flintlockd sent
     (`frames`), output messages that follow back to back joined (same kind, at most
     `COALESCE_BYTES`; while output streams and no stdin goes up, a message waits up to
     `LINGER_SECONDS` for more, see `_coalesce`); the one carrying `exit_code` is the last and
     the call then ends OK. The agent never makes up an exit status: a stream that flintlockd
     ends without one, fails, or sends a message that does not decode, ends with a non-OK
     status (flintlockd's code, except that OK and UNKNOWN become UNAVAILABLE; UNAVAILABLE for
     the message), never with an exit code (EA-101).

Whatever ends the exchange (exit status, failure, the caller cancelling or its deadline), the
upstream stream is cancelled on the way out, so a command is never left running for a caller
who is gone (flintlockd ends the guest session when its RPC ends; EA-102). The end of the claim
does not wait for the way out, which a caller that stopped reading holds up (gRPC resumes the
handler only once the caller took the message it sends): `Ending` cancels the upstream call
and the tasks relaying stdin and output at once, and the handler itself `END_GRACE_SECONDS`
later if it has not ended (EA-115). Backpressure holds end to end: at most `buffer_bytes` of
responses (plus the one being added) wait between flintlockd and a slow caller (`Outbox`);
flintlockd is not read while they do, nor at all once the stream failed; gRPC's own receive
windows have a fixed size on both sides (`memory.transport_options`), so what a caller or
flintlockd sends beyond them waits on their side, not in the agent (EA-116).

Requests arrive already decoded; a message that failed to decode arrives as None (see
`servicer.decode_request`). Messages above the server's size limit never arrive: gRPC fails the
call with RESOURCE_EXHAUSTED, which cancels this relay like any other caller-side end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final, Generic, TypeVar

import grpc
import grpc.aio

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.exec_agent import memory
from batteryop.exec_agent.auth import Authorizer, Caller
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.exec_agent.flintlockd import ExecCall, Flintlockd
from batteryop.exec_agent.frames import EXIT_CODE, MALFORMED, STDERR, STDOUT, Frame, joined_output
from batteryop.exec_agent.streams import ClaimStreams
from batteryop.exec_agent.timing import Phase, PhaseObserver, observe

Request = microvmexec_pb2.ExecCommandRequest

DEFAULT_BUFFER_BYTES: Final = memory.DEFAULT_RELAY_BUFFER_BYTES
"""Output bytes read from flintlockd but not yet sent to the caller, per stream, by default."""

STDIN_KINDS: Final = frozenset({"stdin", "stdin_eof"})
"""The `ExecCommandRequest` messages flintlockd reads after the start, when it has stdin."""

COALESCE_BYTES: Final = memory.JOINED_BYTES
"""The most output bytes joined into one message to the caller: with its framing it fits the
smallest `--max-message-bytes` the agent sends with, and any client takes it (EA-116)."""

LINGER_SECONDS: Final = 0.005
"""While output streams (a message comes within this long of the last one sent, and the caller
sent no stdin since), how long the next message may wait for more to join it: the most the
agent delays output. Output after a quiet spell (a prompt, a line) or after stdin (an answer to
it, as a REPL driven line by line gives) is never held."""

END_GRACE_SECONDS: Final = 1.0
"""Once a stream's claim ended it (EA-106), how long its handler has to send the refusal to
the caller before the handler is cancelled. A caller that reads gets the refusal at once; one
that does not read cannot get it at all (the status waits behind the message gRPC holds for it)."""

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE

_KEPT_CODES: Final = frozenset(grpc.StatusCode) - {grpc.StatusCode.OK, grpc.StatusCode.UNKNOWN}


def flintlockd_failure(code: grpc.StatusCode, details: str | None, what: str) -> RefusedError:
    """The status a failed flintlockd call ends the caller's call with (see the module doc)."""
    kept = code if code in _KEPT_CODES else UNAVAILABLE
    detail = details or code.name
    return RefusedError(kept, Check.FLINTLOCKD, f"{what}: {detail}")


def is_exit(frame: Frame) -> bool:
    return frame.kind == EXIT_CODE


T = TypeVar("T")
M = TypeVar("M")
"""A request message of either relay."""
R = TypeVar("R")
"""A request as it arrives decoded (None when it did not decode)."""
"""What an outbox holds: exec frames, or another stream's responses (`ssh_relay`)."""


class Outbox(Generic[T]):
    """flintlockd's responses waiting for the caller, bounded by their bytes, which a refusal
    can end at once.

    `put` waits while `limit` bytes or more wait (so at most `limit` plus one message per
    writer wait); `get` returns them in order. `fail(e)` makes every later `get` return `e` at
    once, ahead of anything still waiting, and releases any `put`: the stream is over.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: collections.deque[T | RefusedError] = collections.deque()
        self._bytes = 0
        self._failed: RefusedError | None = None
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def bytes(self) -> int:
        """Bytes of responses waiting (as they came on the wire)."""
        return self._bytes

    def empty(self) -> bool:
        return self._failed is None and not self._items

    async def put(self, item: T | RefusedError) -> bool:
        """Add `item` once fewer than `limit` bytes wait; False (and nothing added) if the
        stream failed: the writer stops (nothing is read from flintlockd for nobody)."""
        await self._writable.wait()
        if self._failed is not None:
            return False
        self._items.append(item)
        self._bytes += _size(item)
        self._readable.set()
        if self._bytes >= self._limit:
            self._writable.clear()
        return True

    def get_nowait(self) -> T | RefusedError:
        if self._failed is not None:
            return self._failed
        item = self._items.popleft()
        self._bytes -= _size(item)
        if self._bytes < self._limit:
            self._writable.set()
        if not self._items:
            self._readable.clear()
        return item

    async def get(self) -> T | RefusedError:
        await self._readable.wait()
        return self.get_nowait()

    async def wait(self, deadline: float) -> bool:
        """Whether an item (or the failure) is there by the event loop's time `deadline`."""
        if not self._readable.is_set():
            try:
                async with asyncio.timeout_at(deadline):
                    await self._readable.wait()
            except TimeoutError:
                return False
        return True

    def fail(self, error: RefusedError) -> None:
        """End the stream with `error` (the first one given wins)."""
        if self._failed is None:
            self._failed = error
            self._items.clear()
            self._bytes = 0
            self._readable.set()
            self._writable.set()


def _size(item: object) -> int:
    """An item's bytes as they came on the wire (a refusal or an end mark: none)."""
    if isinstance(item, Frame):
        return len(item.wire)
    return len(item) if isinstance(item, bytes) else 0


class StreamRelay:
    """What the exec and SSH proxy relays share: this Host's flintlockd, the authorizer, the
    claims' stream slots (`ClaimStreams`, one pool for both kinds) and the limits."""

    def __init__(
        self,
        authorizer: Authorizer,
        flintlockd: Flintlockd,
        *,
        streams: ClaimStreams,
        open_timeout: float,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        observer: PhaseObserver | None = None,
        end_grace: float = END_GRACE_SECONDS,
    ) -> None:
        self._authorizer = authorizer
        self._flintlockd = flintlockd
        self._streams = streams
        self._open_timeout = open_timeout
        self._buffer_bytes = buffer_bytes
        self._observer = observer
        self._end_grace = end_grace

    @classmethod
    def like(cls: type[S], other: StreamRelay) -> S:
        """A relay of this kind with `other`'s flintlockd, authorizer, stream slots and limits."""
        return cls(
            other._authorizer,
            other._flintlockd,
            streams=other._streams,
            open_timeout=other._open_timeout,
            buffer_bytes=other._buffer_bytes,
            observer=other._observer,
            end_grace=other._end_grace,
        )

    async def turn_away(
        self, peer: str | None, metadata: Iterable[tuple[str, str | bytes]] | None = None
    ) -> RefusedError | None:
        """The refusal a call from `peer` with `metadata` gets before its first message is
        read (EA-105, EA-121), if any."""
        return await self._authorizer.turn_away(peer, metadata)


S = TypeVar("S", bound=StreamRelay)


class ExecRelay(StreamRelay):
    """Authorizes and relays `ExecCommand` streams to this Host's flintlockd."""

    async def run(
        self,
        requests: AsyncIterator[Request | None],
        metadata: Iterable[tuple[str, str | bytes]] | None,
        peer: str | None = None,
    ) -> AsyncIterator[bytes]:
        """Authorize, open and relay one exec stream (see the module docstring); what it
        yields are the caller's messages, serialized (`frames`)."""
        caller, first = await authenticated_first(
            self._authorizer, requests, metadata, peer, self._open_timeout
        )
        try:
            start = _valid_start(first, self._open_timeout)
        except BaseException:
            if caller.claim_read is not None:
                caller.claim_read.task.cancel()
            raise
        claim = await self._authorizer.authorize(caller, start.uid)
        outbox: Outbox[Frame] = Outbox(self._buffer_bytes)
        ending: Ending[Frame] = Ending(outbox, self._end_grace)
        stream = self._streams.admit(caller, claim, start.uid, end=ending.end)  # EA-105, EA-106
        ending.release = lambda: self._streams.release(stream)
        try:
            call = await self._open(start, ending)
            started = time.perf_counter()
            try:
                async for response in self._relay(
                    requests, call, outbox, ending, has_stdin=start.has_stdin
                ):
                    yield response
            finally:
                call.cancel()  # a no-op once flintlockd sent the exit status
                observe(self._observer, Phase.EXEC, started)
        finally:
            ending.finish()

    async def _open(self, start: microvmexec_pb2.ExecStart, ending: Ending[Frame]) -> ExecCall:
        """EA-021: flintlockd answers for the MicroVM and takes the start, in time."""
        call = self._flintlockd.exec_command()
        await open_upstream(
            self._flintlockd,
            call,
            Request(start=start),
            start.uid,
            ending,
            what="ExecCommand",
            timeout=self._open_timeout,
            observer=self._observer,
        )
        return call

    async def _relay(
        self,
        requests: AsyncIterator[Request | None],
        call: ExecCall,
        outbox: Outbox[Frame],
        ending: Ending,
        *,
        has_stdin: bool,
    ) -> AsyncIterator[bytes]:
        turns = _Turns()
        tasks = [
            asyncio.create_task(_from_flintlockd(call, outbox)),
            asyncio.create_task(
                to_flintlockd(
                    requests,
                    call,
                    outbox,
                    message="ExecCommandRequest",
                    first="start",
                    again="a second start message",
                    # flintlockd reads stdin only when the start said so (flintlock-api §8.5)
                    forwarded=STDIN_KINDS if has_stdin else frozenset(),
                    # before the write: the answer cannot come before it
                    before_write=turns.saw_stdin,
                )
            ),
        ]
        ending.tasks = tasks
        held: Frame | RefusedError | None = None
        loop = asyncio.get_running_loop()
        sent = -LINGER_SECONDS  # when output last went to the caller (loop time)
        try:
            while True:
                item = held if held is not None else await outbox.get()
                held = None
                if isinstance(item, RefusedError):
                    raise item
                output = item.kind in (STDOUT, STDERR)
                if output:
                    streaming = loop.time() - sent < LINGER_SECONDS and not turns.stdin
                    item, held = await _coalesce(item, outbox, linger=streaming)
                yield item.wire
                if output:
                    sent = loop.time()
                    turns.stdin = False
                if is_exit(item):  # EA-020: the exit status is the last frame, and only OK end
                    return
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)


async def _coalesce(
    first: Frame, outbox: Outbox[Frame], *, linger: bool
) -> tuple[Frame, Frame | RefusedError | None]:
    """`first` (stdout or stderr) joined with the outbox's next messages of the same kind, up to
    `COALESCE_BYTES`, and the first item that could not join (sent next).

    Messages already waiting join at once. With `linger` (output is streaming: `first` came
    within `LINGER_SECONDS` of the last message sent, and no stdin went up since), more are
    waited for, for at most `LINGER_SECONDS` in all: bulk output then reaches the caller in
    messages of hundreds of KiB instead of flintlockd's reads of at most 32 KiB
    (flintlock-api.md §8.5), a small part of the messages for the caller's gRPC and ours to
    handle (docs/dev/client-performance.md), while output after a quiet spell goes on at
    once. The bytes and their order (also between stdout and stderr) stay exactly as
    flintlockd sent them.
    """
    chunks = [first.output]
    size = first.size
    held: Frame | RefusedError | None = None
    deadline: float | None = None
    while size < COALESCE_BYTES:
        if outbox.empty():
            if not linger:
                break
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + LINGER_SECONDS
            if not await outbox.wait(deadline):
                break
        item = outbox.get_nowait()
        if (
            not isinstance(item, Frame)
            or item.kind != first.kind
            or size + item.size > COALESCE_BYTES
        ):
            held = item
            break
        chunks.append(item.output)
        size += item.size
    if len(chunks) == 1:
        return first, held  # passed on as the bytes that came
    return joined_output(first.kind, chunks, size), held


class Ending(Generic[T]):
    """Ends one stream from outside its handler, whatever the handler is doing (EA-106).

    The handler relays in an async generator that gRPC resumes only once the caller took the
    last message it yielded: a caller that stops reading holds it at its `yield` for as long
    as it likes. So `end` (what `ClaimStreams` calls when the claim no longer allows the
    stream) does not wait for the handler: at once it fails the outbox (the refusal a reading
    caller gets as its status), cancels the `ExecCommand` call on flintlockd (which ends the
    command, EA-102) and the tasks relaying stdin and output; after `grace` it frees the
    stream's slot and cancels the handler's task, unless the handler ended first (`finish`).
    """

    def __init__(self, outbox: Outbox[T], grace: float) -> None:
        self._outbox = outbox
        self._grace = grace
        self._handler = asyncio.current_task()
        self._ended: RefusedError | None = None
        self._finished = False
        self._timer: asyncio.TimerHandle | None = None
        self.call: grpc.aio.StreamStreamCall | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.release: Callable[[], None] = _nothing
        """Frees the stream's slot (`ClaimStreams.release`)."""

    def end(self, error: RefusedError) -> None:
        if self._ended is not None or self._finished:
            return
        self._ended = error
        self._outbox.fail(error)
        if self.call is not None:
            self.call.cancel()
        for task in self.tasks:
            task.cancel()
        self._timer = asyncio.get_running_loop().call_later(self._grace, self._stop_handler)

    def raise_if_ended(self) -> None:
        """Raise the refusal that ended the stream, if one did."""
        if self._ended is not None:
            raise self._ended

    def _stop_handler(self) -> None:
        if not self._finished:
            self.finish()
            if self._handler is not None:
                self._handler.cancel()

    def finish(self) -> None:
        """The stream is over (its handler ended, or was cancelled): free its slot once."""
        if not self._finished:
            self._finished = True
            if self._timer is not None:
                self._timer.cancel()
            self.release()


def _nothing() -> None:
    pass


class _Turns:
    """Whether the caller's stdin went to flintlockd since output last went to the caller: the
    next output may answer it, so it is not held for more (`LINGER_SECONDS`)."""

    __slots__ = ("stdin",)

    def __init__(self) -> None:
        self.stdin = False

    def saw_stdin(self) -> None:
        self.stdin = True


class NoFirst:
    """The caller closed its side before sending anything (or sent nothing in time)."""


ENDED: Final = NoFirst()
TIMED_OUT: Final = NoFirst()


async def open_upstream(
    flintlockd: Flintlockd,
    call: grpc.aio.StreamStreamCall,
    first: object,
    uid: str,
    ending: Ending[Any],
    *,
    what: str,
    timeout: float,
    observer: PhaseObserver | None,
) -> None:
    """EA-021: flintlockd answers for the MicroVM `uid` and takes the stream `call` with its
    `first` message, within `timeout`.

    The `GetMicroVM` probe and the stream with its first message go out together (a command
    may start before the probe's answer is in); a probe that fails or is late cancels the
    stream. Refusals name `what` (the call) and keep flintlockd's code (`flintlockd_failure`).
    """
    started = time.perf_counter()
    ending.call = call
    probe = asyncio.ensure_future(flintlockd.get_microvm(uid))
    sending = asyncio.ensure_future(call.write(first))
    try:
        async with asyncio.timeout(timeout):
            try:
                await probe
            except grpc.aio.AioRpcError as e:
                raise flintlockd_failure(e.code(), e.details(), "GetMicroVM") from None
            try:
                await sending
            except grpc.aio.AioRpcError as e:
                raise flintlockd_failure(e.code(), e.details(), what) from None
            except asyncio.InvalidStateError:
                # The stream ended before the first message went out: flintlockd refused it.
                code, details = await call.code(), await call.details()
                raise flintlockd_failure(code, details, what) from None
    except TimeoutError:
        call.cancel()
        ending.raise_if_ended()
        raise RefusedError(
            UNAVAILABLE,
            Check.FLINTLOCKD,
            f"flintlockd did not take the stream within {timeout:g}s",
        ) from None
    except BaseException:
        call.cancel()
        ending.raise_if_ended()  # the claim's refusal, not the cancelled call's
        raise
    finally:
        for future in (probe, sending):
            future.cancel()
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: a failure was reported above, or moot
        observe(observer, Phase.FLINTLOCKD_OPEN, started)
    ending.raise_if_ended()


async def first_message(requests: AsyncIterator[R], open_timeout: float) -> R | NoFirst:
    """The caller's first message (None: it did not decode), `ENDED` if the caller closed its
    side first, `TIMED_OUT` if nothing came within `open_timeout`."""
    try:
        async with asyncio.timeout(open_timeout):
            return await anext(requests, ENDED)
    except TimeoutError:
        return TIMED_OUT


async def authenticated_first(
    authorizer: Authorizer,
    requests: AsyncIterator[R],
    metadata: Iterable[tuple[str, str | bytes]] | None,
    peer: str | None,
    open_timeout: float,
) -> tuple[Caller, R | NoFirst]:
    """Step 1 of the module doc, for any stream whose first message names the MicroVM: the
    caller, authenticated, and its first message (`first_message`). A refusal is raised only
    once the first message is in, or the stream ended, or `open_timeout` passed."""
    first = asyncio.ensure_future(first_message(requests, open_timeout))
    try:
        try:
            caller = await authorizer.authenticate(metadata, read_claim=True, peer=peer)
        finally:
            # Refused or not, the status goes out only once the first message is in.
            await asyncio.wait([first])
    except BaseException:
        first.cancel()  # a no-op unless this call itself was cancelled
        if first.done() and not first.cancelled():
            first.exception()  # retrieved: the refusal is what the caller gets
        raise
    return caller, first.result()


def _valid_start(first: Request | None | NoFirst, open_timeout: float) -> microvmexec_pb2.ExecStart:
    """The start message the first message must be (step 2 of the module doc)."""
    if first is TIMED_OUT:
        raise RefusedError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Check.REQUEST,
            f"no start message within {open_timeout:g}s",
        )
    if first is ENDED:
        raise RefusedError(INVALID_ARGUMENT, Check.REQUEST, "the stream ended before a start")
    if first is None:
        raise RefusedError(
            INVALID_ARGUMENT, Check.REQUEST, "the first message is not an ExecCommandRequest"
        )
    assert isinstance(first, Request)
    if first.WhichOneof("payload") != "start":
        raise RefusedError(
            INVALID_ARGUMENT, Check.REQUEST, "the first message must be a start message"
        )
    start = first.start
    if not start.uid:
        raise RefusedError(INVALID_ARGUMENT, Check.REQUEST, "the start names no microvm uid")
    if not (start.cmd or start.shell):
        raise RefusedError(INVALID_ARGUMENT, Check.REQUEST, "the start names no command")
    return start


async def _from_flintlockd(call: ExecCall, outbox: Outbox) -> None:
    """flintlockd's responses into the outbox, then how its stream ended if not by an exit."""
    try:
        while True:
            response = await call.read()
            if response is grpc.aio.EOF:
                await outbox.put(
                    RefusedError(
                        UNAVAILABLE,
                        Check.FLINTLOCKD,
                        "flintlockd ended the stream without an exit status",
                    )
                )
                return
            if response.kind == MALFORMED:  # nothing after it can be trusted
                await outbox.put(
                    RefusedError(
                        UNAVAILABLE,
                        Check.FLINTLOCKD,
                        f"flintlockd sent a message that is not an ExecCommandResponse: "
                        f"{response.detail}",
                    )
                )
                return
            if not await outbox.put(response) or is_exit(response):
                return  # the stream failed, or flintlockd is done
    except grpc.aio.AioRpcError as e:
        await outbox.put(flintlockd_failure(e.code(), e.details(), "the exec stream failed"))


async def to_flintlockd(
    requests: AsyncIterator[M | None],
    call: grpc.aio.StreamStreamCall,
    outbox: Outbox[Any],
    *,
    message: str,
    first: str,
    again: str,
    forwarded: frozenset[str],
    before_write: Callable[[], None] | None = None,
) -> None:
    """The caller's messages after its first to flintlockd, for either relay: those whose
    `payload` is one of `forwarded` go on as they came (`before_write` runs before each), its
    half-close half-closes upstream; a message that does not decode (not a `message`), or a
    second `first`, ends the stream with INVALID_ARGUMENT (`again` says which) through the
    outbox. Other messages are dropped, as flintlockd drops them."""
    try:
        async for request in requests:
            if request is None:
                await outbox.put(
                    RefusedError(INVALID_ARGUMENT, Check.REQUEST, f"a message is not an {message}")
                )
                return
            kind = request.WhichOneof("payload")  # type: ignore[attr-defined]
            if kind == first:
                await outbox.put(RefusedError(INVALID_ARGUMENT, Check.REQUEST, again))
                return
            if kind in forwarded:
                if before_write is not None:
                    before_write()
                await call.write(request)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return  # flintlockd's side ended; its reader reports how
