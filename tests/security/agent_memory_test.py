"""One Holder cannot get the agent killed for memory, ending every exec on its Host (issue 43,
EA-105, EA-116).

The attack: as many exec streams as the agent admits, each a command writing output without
end that nobody reads, each sent stdin the command never reads until gRPC takes no more. The
agent runs as its own process (its pex) in a
memory cgroup limited as its container is (`names.EXEC_AGENT_MEMORY_LIMIT_MIB`). It must stay
up, refuse the streams beyond its limit with RESOURCE_EXHAUSTED, and its peak stay under the
limit. Real API server and tokens, the fake flintlockd process, loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.exec_agent import (
    AGENT_ADDRESS,
    Holders,
    Pki,
    agent_process_args,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.polling import wait_until

pytestmark = pytest.mark.controlplane

Start = microvmexec_pb2.ExecStart
Request = microvmexec_pb2.ExecCommandRequest

AGENT_PEX = Path("src.python.batteryop.exec_agent/exec-agent.pex")
"""The agent as a release ships it (a runtime package of this suite)."""
LIMIT_BYTES = names.EXEC_AGENT_MEMORY_LIMIT_MIB * 1024 * 1024
MOST_STREAMS = 320
"""The test opens at most this many streams (more than any default lets run)."""
PER_CLAIM = 16
"""The agent's default `--max-streams-per-claim`: each claim gets this many."""
REFUSED_AT_LEAST = 4
"""Streams beyond the limit the test checks are refused, after the first refusal."""
STDIN_CHUNK = b"s" * (64 * 1024)
"""The client's stdin message size."""
MOST_STDIN_CHUNKS = 96
"""At most this much stdin per stream (6 MiB): more than the agent and flintlockd take unread."""
FIRST_ANSWER_WITHIN = 30.0
"""Seconds a stream has to show its first output or its refusal."""
STDIN_WAIT = 0.5
"""A stdin write not taken within this long is held by flow control."""
OUTPUT_HEAVY = "yes agent-memory-output-line"


class MemoryCgroup:
    """A memory cgroup (v2, or v1's memory controller) of our own, limited to `limit` bytes."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @classmethod
    def create(cls, limit: int) -> MemoryCgroup:
        name = f"agent-memory-{uuid.uuid4().hex[:8]}"
        unified = Path("/sys/fs/cgroup")
        if (unified / "cgroup.controllers").exists():
            parent = unified / _own_cgroup("")
            if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
                pytest.skip(f"cgroup v2 without the memory controller enabled at {parent}")
            path = parent / name
            path.mkdir()
            (path / "memory.max").write_text(str(limit))
            (path / "memory.swap.max").write_text("0")
            return cls(path, 2)
        v1 = Path("/sys/fs/cgroup/memory")
        if not v1.is_dir():
            pytest.skip("no memory cgroup (neither v2 nor v1's memory controller is mounted)")
        path = v1 / _own_cgroup("memory").lstrip("/") / name
        try:
            path.mkdir()
        except OSError as e:
            pytest.skip(f"cannot create a memory cgroup at {path}: {e}")
        (path / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):  # no swap accounting on some kernels
            (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        return cls(path, 1)

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, run inside the cgroup from its first instruction."""
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]

    def peak(self) -> int:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return int((self.path / name).read_text())

    def usage(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text())

    def oom_kills(self) -> int:
        if self.version == 2:
            events = (self.path / "memory.events").read_text().split()
        else:
            events = (self.path / "memory.oom_control").read_text().split()
        fields = dict(zip(events[::2], events[1::2], strict=True))
        return int(fields.get("oom_kill", "0"))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path for `controller` ("" for v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (not controller and not controllers):
            return path.lstrip("/")
    raise AssertionError(f"no {controller or 'v2'} cgroup in /proc/self/cgroup")


def high_water_mark(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@contextlib.asynccontextmanager
async def agent_in_cgroup(
    cluster: ControlPlane, pki: Pki, flintlockd: FakeFlintlockd, tmp_path: Path, limit: int
) -> AsyncIterator[tuple[asyncio.subprocess.Process, MemoryCgroup, str, list[str]]]:
    """The agent's process with its default limits in a fresh memory cgroup of `limit` bytes:
    (process, cgroup, its target, its log lines so far)."""
    args, port = agent_process_args(cluster, pki, flintlockd.target, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEX") and k != "PYTHONPATH"}
    argv = [
        sys.executable,
        str(AGENT_PEX),
        *args,
        # One Holder here stands for every Holder on the Host: the memory bound must hold when
        # all `--max-streams` run, however many Holders share them, so the per-Holder cap
        # (EA-123, a bound of its own) is lifted above the total.
        f"--max-streams-per-holder={MOST_STREAMS}",
    ]
    cgroup = MemoryCgroup.create(limit)
    lines: list[str] = []
    listening = asyncio.Event()
    process = await asyncio.create_subprocess_exec(
        *cgroup.wrap(argv),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )

    async def read() -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            lines.append(line)
            with contextlib.suppress(ValueError):
                if json.loads(line).get("message") == "Exec API listening":
                    listening.set()

    reader = asyncio.create_task(read())
    try:
        await asyncio.wait(
            [reader, asyncio.ensure_future(listening.wait())],
            timeout=60,
            return_when=asyncio.FIRST_COMPLETED,
        )
        assert listening.is_set(), f"the agent did not start: {lines[-5:]}"
        yield process, cgroup, f"{AGENT_ADDRESS}:{port}", lines
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        cgroup.remove()


async def stall(
    channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...], uid: str
) -> grpc.aio.StreamStreamCall:
    """A stream running `OUTPUT_HEAVY` that is never read, sent stdin until gRPC takes no
    more within `STDIN_WAIT` (the write is left pending: cancelling it would cancel the call),
    or `MOST_STDIN_CHUNKS` went, or the agent ended the call (a refusal)."""
    call = MicroVMExecStub(channel).ExecCommand(metadata=metadata)
    start = Start(uid=uid, cmd=OUTPUT_HEAVY, shell=True, has_stdin=True)
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
        await call.write(Request(start=start))
        # The first answer tells a running stream (its first output) from a refused one (its
        # status), before any stdin: stdin written while a refusal is on its way can fail on
        # the client first, which gRPC then reports as its own INTERNAL error, not the agent's.
        if await asyncio.wait_for(call.read(), FIRST_ANSWER_WITHIN) is grpc.aio.EOF:
            return call
        for _ in range(MOST_STDIN_CHUNKS):
            write = asyncio.ensure_future(call.write(Request(stdin=STDIN_CHUNK)))
            await asyncio.wait([write], timeout=STDIN_WAIT)
            if not write.done():
                _pending.add(write)  # flow control holds stdin: the agent takes no more
                break
            write.result()
    return call


_pending: set[asyncio.Future[None]] = set()
"""Writes flow control holds; they end with their calls."""


@pytest.mark.req("EA-105", "EA-116")
async def test_unread_streams_up_to_the_limit_do_not_take_the_agent_over_its_memory(
    cluster: ControlPlane, pki: Pki, flintlockd: FakeFlintlockd, holders: Holders, tmp_path: Path
) -> None:
    async with agent_in_cgroup(cluster, pki, flintlockd, tmp_path, LIMIT_BYTES) as (
        process,
        cgroup,
        target,
        lines,
    ):
        baseline = cgroup.usage()
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.exec_serving_ca.cert_pem)
        # No BDP probing: the test's own process does not buffer megabytes per unread stream.
        options = [("grpc.http2.bdp_probe", 0)]
        calls: list[grpc.aio.StreamStreamCall] = []
        refused: list[tuple[grpc.StatusCode, str]] = []
        channels: list[grpc.aio.Channel] = []
        try:
            # Every claim first: the fake flintlockd is busy once the streams run.
            holdings = [await holders.hold() for _ in range(-(-MOST_STREAMS // PER_CLAIM))]
            for holding in holdings:
                if len(refused) >= REFUSED_AT_LEAST:
                    break
                # A connection per claim, as many Holders' clients would have.
                channel = grpc.aio.secure_channel(target, credentials, options=options)
                channels.append(channel)
                for _ in range(PER_CLAIM):
                    call = await stall(channel, holding.metadata, holding.microvm_uid)
                    if call.done():
                        refused.append((await call.code(), await call.details()))
                    else:
                        calls.append(call)
                assert process.returncode is None, f"the agent died: {lines[-5:]}"
            # The buffers fill as the commands write: wait until the agent's memory settles.
            samples: list[int] = []

            async def settled() -> bool:
                samples.append(cgroup.usage())
                return len(samples) > 10 and max(samples[-10:]) - min(samples[-10:]) < 2**20

            await wait_until(settled, bool, what="the agent's memory settles", within=60)
            alive = process.returncode is None
            peak, hwm, oom_kills = cgroup.peak(), high_water_mark(process.pid), cgroup.oom_kills()
            print(
                f"{len(calls)} unread streams running, {len(refused)} refused; agent memory: "
                f"baseline {baseline / 2**20:.1f} MiB, cgroup peak {peak / 2**20:.1f} MiB, "
                f"VmHWM {hwm / 2**20:.1f} MiB, limit {LIMIT_BYTES / 2**20:.0f} MiB"
            )
        finally:
            for call in calls:
                call.cancel()
            for write in _pending:
                write.cancel()
            _pending.clear()
            for channel in channels:
                await channel.close()
    assert alive, f"the agent died: {lines[-5:]}"
    assert oom_kills == 0, f"{oom_kills} processes of the agent's cgroup were OOM-killed"
    assert len(refused) >= REFUSED_AT_LEAST, f"only {len(refused)} streams were refused"
    for code, details in refused:
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert details.startswith("limit: the agent runs "), details
    assert peak < LIMIT_BYTES * 0.9, f"the agent's memory peaked at {peak} bytes"
