"""`die_with_parent` and `file_tail`: the harnesses' children die with their starter, start
cleanly from a process busy with gRPC, and their logs are read back for errors."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc

from batteryop.testing.processes import die_with_parent, file_tail

SERVICE = "batteryop.test.Echo"


async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


def test_a_child_is_killed_when_the_process_that_started_it_ends() -> None:
    # sh says it runs (setpriv has exec'd it), then becomes a long sleep with the same pid.
    argv = die_with_parent(["sh", "-c", "echo running; exec sleep 600"])
    starter = textwrap.dedent(f"""
        import os, subprocess, sys
        child = subprocess.Popen({argv!r}, stdout=subprocess.PIPE, start_new_session=True)
        assert child.stdout.readline() == b"running\\n"
        print(child.pid, flush=True)
        sys.stdin.read()  # the test says when to end
        os._exit(0)  # no cleanup: as if it crashed
        """)
    proc = subprocess.Popen(
        [sys.executable, "-c", starter], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    pid = int(proc.stdout.readline())
    pidfd = os.pidfd_open(pid)  # readable once the process has exited, child of ours or not
    try:
        assert select.select([pidfd], [], [], 0)[0] == [], "the child ended before its starter"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        readable, _, _ = select.select([pidfd], [], [], 30)
        assert readable == [pidfd], "the child outlived the process that started it"
    finally:
        os.close(pidfd)


async def test_children_started_under_grpc_traffic_all_exec() -> None:
    # Python code between fork and exec (a preexec_fn) in a process with gRPC's threads killed
    # about one child in four here: every one of these must reach exec and exit 0.
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, {"Echo": handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stop = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(f"/{SERVICE}/Echo")

            async def traffic() -> int:
                calls = 0
                while not stop.is_set():
                    assert await call(b"x" * 1024) == b"x" * 1024
                    calls += 1
                return calls

            callers = [asyncio.create_task(traffic()) for _ in range(8)]
            codes = []
            for _ in range(100):
                child = await asyncio.create_subprocess_exec(
                    *die_with_parent(["true"]), start_new_session=True
                )
                codes.append(await child.wait())
            stop.set()
            calls = await asyncio.gather(*callers)
    finally:
        await server.stop(None)
    assert min(calls) > 0, "no gRPC traffic while the children started"
    assert codes == [0] * 100, f"children that did not exit 0: {[c for c in codes if c]}"


def test_file_tail_gives_the_last_lines_or_says_why_there_are_none(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(40)) + b"\xff bad\n")
    assert file_tail(log, 3) == "line 38\nline 39\n\ufffd bad"
    assert file_tail(tmp_path / "missing.log").startswith("(no log: [Errno 2] No such file")
