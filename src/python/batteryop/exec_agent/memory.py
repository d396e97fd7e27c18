"""What exec streams may cost the agent in memory, and the limits that follow (EA-105, EA-116).

One formula bounds what a running stream can hold, whatever its caller and command do
(`stream_bytes`):

- into the agent, gRPC's receive window of each HTTP/2 stream: the caller's stdin and
  flintlockd's output, `WINDOW_BYTES` each. With BDP probing (gRPC's default) a window grows
  to about 4 MiB when data waits, so the agent turns probing off on both sides of the relay
  (`transport_options`) and sets the window itself;
- one stdin message on its way to flintlockd: as received, serialized and in gRPC's send,
  three `max_message_bytes` (the pump reads no further while flintlockd has not taken it);
- output read from flintlockd for a caller who has not taken it: the outbox,
  `relay_buffer_bytes` plus the one message over it (`relay.Outbox`);
- the message being sent to the caller, output joined up to `relay.COALESCE_BYTES`, and
  gRPC's copy of it;
- `STREAM_OVERHEAD_BYTES` for the call, its tasks and frames.

The agent runs at most `max_streams` of them, so the streams' worst case is `max_streams *
stream_bytes`; `config` refuses flags whose worst case exceeds `--stream-memory-bytes`
(`STREAM_MEMORY_BYTES` by default: the container's limit less the agent's own baseline and
headroom), and `DEFAULT_MAX_STREAMS` is as many as the defaults fit in it. A stream beyond
`max_streams` is refused with RESOURCE_EXHAUSTED (`streams.ClaimStreams`).

With the defaults: 2 x 128 KiB + 3 x 128 KiB + (256 + 128) KiB + 2 x (128 KiB - 64) +
128 KiB = 1,441,664 bytes (about 1.4 MiB) a stream; 128 MiB / 1.4 MiB = 93 streams.
"""

from __future__ import annotations

from typing import Any, Final

from batteryop.api import names

KIB: Final = 1024
MIB: Final = 1024 * KIB

CONTAINER_MEMORY_BYTES: Final = names.EXEC_AGENT_MEMORY_LIMIT_MIB * MIB
"""The container's memory limit (the Manifests set it)."""
BASELINE_BYTES: Final = 96 * MIB
"""The agent's own memory without streams (interpreter, gRPC, TLS, the claims cache) with room
to grow: its cgroup measured about 45 MiB (tests/security/agent_memory_test.py)."""
HEADROOM_BYTES: Final = 32 * MIB
"""Kept free under the limit (allocator fragmentation, bursts of calls being refused)."""
STREAM_MEMORY_BYTES: Final = CONTAINER_MEMORY_BYTES - BASELINE_BYTES - HEADROOM_BYTES
"""The streams' worst case may use this much, by default (`--stream-memory-bytes`)."""

MIN_MESSAGE_BYTES: Final = 128 * KIB
"""The smallest `--max-message-bytes` (and `--relay-buffer-bytes`): the client's 64 KiB stdin
messages and flintlockd's 32 KiB output messages fit, with their framing, and output joins."""
DEFAULT_MAX_MESSAGE_BYTES: Final = MIN_MESSAGE_BYTES
"""The largest gRPC message, either way on both sides of the relay: what flintlock and the
client send (output messages of at most 32 KiB, stdin messages of at most 64 KiB), with room."""
DEFAULT_RELAY_BUFFER_BYTES: Final = 256 * KIB
"""Output read from flintlockd and not yet sent, per stream."""
WINDOW_BYTES: Final = 128 * KIB
"""gRPC's HTTP/2 receive window of each stream into the agent (see the module doc)."""
JOINED_BYTES: Final = MIN_MESSAGE_BYTES - 64
"""The most output bytes joined into one message to the caller (three of flintlockd's 32 KiB
messages): with its framing, it fits any `--max-message-bytes`."""
STREAM_OVERHEAD_BYTES: Final = 128 * KIB
"""A stream's call, tasks and frames, beyond its buffers."""


def stream_bytes(*, max_message_bytes: int, relay_buffer_bytes: int) -> int:
    """The most memory one exec stream holds (the module doc names each part)."""
    return (
        2 * WINDOW_BYTES
        + 3 * max_message_bytes
        + relay_buffer_bytes
        + max_message_bytes
        + 2 * JOINED_BYTES
        + STREAM_OVERHEAD_BYTES
    )


def streams_that_fit(budget: int, *, max_message_bytes: int, relay_buffer_bytes: int) -> int:
    """How many streams' worst case fits in `budget` bytes."""
    one = stream_bytes(max_message_bytes=max_message_bytes, relay_buffer_bytes=relay_buffer_bytes)
    return budget // one


DEFAULT_MAX_STREAMS: Final = streams_that_fit(
    STREAM_MEMORY_BYTES,
    max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
    relay_buffer_bytes=DEFAULT_RELAY_BUFFER_BYTES,
)
"""`--max-streams` by default: as many as fit in `STREAM_MEMORY_BYTES` with the defaults."""


def transport_options() -> list[tuple[str, Any]]:
    """gRPC options for the agent's server and its channel to flintlockd: a fixed receive
    window of `WINDOW_BYTES` per stream, no BDP probing to grow it."""
    return [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", WINDOW_BYTES)]
