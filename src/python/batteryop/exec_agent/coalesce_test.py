"""How the relay joins flintlockd's output messages on the way to the caller (EA-020): what
waits joins at once; while output streams, more is waited for, for a bounded time; after a
quiet spell nothing waits; bytes, kinds and order are kept, and a refusal is never swallowed.

These drive `relay._coalesce` against a real `Outbox`, with the messages put in from the test,
so each case is decided by what the test puts in and when, not by a machine's speed; the path
through a running agent is in relay_test.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.exec_agent import relay
from batteryop.exec_agent.errors import Check, RefusedError
from batteryop.exec_agent.frames import Frame, read_frame
from batteryop.exec_agent.relay import COALESCE_BYTES, LINGER_SECONDS, Outbox, _coalesce

Response = microvmexec_pb2.ExecCommandResponse

CHUNK = 32 * 1024
"""flintlockd's largest output message (flintlock-api.md §8.5)."""
NEVER = 3600.0
"""A linger no test may wait out: a case that waited for it would hang, then fail below."""
DONE_WITHIN = 10.0


def out(size: int, fill: bytes = b"o") -> Frame:
    """A stdout message of `size` bytes as it comes from flintlockd."""
    return read_frame(Response(stdout=fill * size).SerializeToString())


def stdout(frame: Frame) -> bytes:
    """The stdout bytes of `frame`'s message, decoded by the generated code."""
    message = Response.FromString(frame.wire)
    assert message.WhichOneof("payload") == "stdout"
    return message.stdout


@pytest.fixture
def outbox(monkeypatch: pytest.MonkeyPatch) -> Outbox:
    """An empty outbox, and a linger of `NEVER`."""
    monkeypatch.setattr(relay, "LINGER_SECONDS", NEVER)
    return Outbox(COALESCE_BYTES)


async def lingering(outbox: Outbox, first: Frame) -> asyncio.Task[tuple[Frame, object]]:
    """`_coalesce(first, linger=True)` running, and waiting on `outbox` (it found it empty)."""
    task = asyncio.ensure_future(_coalesce(first, outbox, linger=True))
    await settle()
    assert not task.done()
    return task


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)  # every ready callback runs: a waiting task stays waiting


@pytest.mark.req("EA-020")
async def test_messages_already_waiting_join_at_once() -> None:
    outbox: Outbox[Frame] = Outbox(COALESCE_BYTES)
    for fill in (b"b", b"c"):
        await outbox.put(out(CHUNK, fill))
    await outbox.put(out(10, b"d"))
    joined, held = await asyncio.wait_for(
        _coalesce(out(CHUNK, b"a"), outbox, linger=False), DONE_WITHIN
    )
    assert stdout(joined) == b"a" * CHUNK + b"b" * CHUNK + b"c" * CHUNK + b"d" * 10
    assert held is None
    assert outbox.empty()


@pytest.mark.req("EA-020")
async def test_output_after_a_quiet_spell_goes_on_without_waiting(
    outbox: Outbox,
) -> None:
    first = out(CHUNK)
    joined, held = await asyncio.wait_for(_coalesce(first, outbox, linger=False), DONE_WITHIN)
    assert joined is first and held is None


@pytest.mark.req("EA-020")
async def test_streaming_output_waits_for_more_up_to_the_coalesce_limit(
    outbox: Outbox,
) -> None:
    task = await lingering(outbox, out(CHUNK, b"a"))
    await outbox.put(out(CHUNK, b"b"))
    await settle()
    assert not task.done()  # b joined; it waits on for more
    await outbox.put(out(COALESCE_BYTES - 2 * CHUNK, b"c"))
    joined, held = await asyncio.wait_for(task, DONE_WITHIN)
    assert stdout(joined) == b"a" * CHUNK + b"b" * CHUNK + b"c" * (COALESCE_BYTES - 2 * CHUNK)
    assert held is None


@pytest.mark.req("EA-020")
async def test_streaming_output_waits_at_most_the_linger() -> None:
    outbox: Outbox[Frame] = Outbox(COALESCE_BYTES)
    first = out(CHUNK)
    loop = asyncio.get_running_loop()
    began = loop.time()
    joined, held = await asyncio.wait_for(_coalesce(first, outbox, linger=True), DONE_WITHIN)
    assert joined is first and held is None
    assert loop.time() - began >= LINGER_SECONDS


@pytest.mark.req("EA-020")
async def test_the_joined_message_stops_at_the_coalesce_limit() -> None:
    outbox: Outbox[Frame] = Outbox(4 * COALESCE_BYTES)
    for _ in range(COALESCE_BYTES // CHUNK):
        await outbox.put(out(CHUNK))
    joined, held = await asyncio.wait_for(_coalesce(out(CHUNK), outbox, linger=True), DONE_WITHIN)
    # Whole messages join while they fit: as many CHUNKs as COALESCE_BYTES holds.
    assert len(stdout(joined)) == COALESCE_BYTES // CHUNK * CHUNK
    # The one over the limit is sent next: held when it was taken to see whether it fits (the
    # joined size was below the limit), else left in the outbox (the limit was met exactly).
    rest = held if held is not None else outbox.get_nowait()
    assert isinstance(rest, Frame) and len(stdout(rest)) == CHUNK
    assert outbox.empty()


@pytest.mark.req("EA-020", "EA-106")
@pytest.mark.parametrize(
    "ending",
    [
        read_frame(Response(stderr=b"err").SerializeToString()),  # the other kind: sent next,
        # so stdout and stderr keep their order
        RefusedError(grpc.StatusCode.PERMISSION_DENIED, Check.CLAIM, "the claim is gone"),
    ],
    ids=["stderr", "refusal"],
)
async def test_the_other_kind_or_a_refusal_ends_the_wait_and_is_sent_next(
    outbox: Outbox, ending: Frame | RefusedError
) -> None:
    task = await lingering(outbox, out(CHUNK, b"a"))
    if isinstance(ending, RefusedError):
        outbox.fail(ending)
    else:
        await outbox.put(ending)
    joined, held = await asyncio.wait_for(task, DONE_WITHIN)
    assert stdout(joined) == b"a" * CHUNK
    assert held is ending
