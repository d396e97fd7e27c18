"""A bare exec client as its own process: it opens `ExecCommand` streams and reads them to the
end, doing as little per message as a reader can, so that what it costs is gRPC's own work.

`exec_agent_bench` reads 100 MiB through the Exec Agent with it (so the agent's process holds
the agent alone, as in production), and straight from `bench.flintlockd_standin`, where the two
bare processes give gRPC's floor: the CPU a sender and a reader spend on 100 MiB in messages of
a given size, with no relay in between.

    python -m bench.exec_reader --target 127.0.0.42:PORT --ca F [--cert F --key F]
        [--token-file F] --uid U [--cmd stdout] [--runs 3]

Each run prints one JSON line: {"seconds", "cpu_seconds" (this process, user + system),
"stdout_bytes", "messages"}. The responses are taken as bytes (no deserializer); only the
length prefix of each stdout message is read, to count its bytes, and the last message must
be exit code 0 (`batteryop.client._wire` decodes it), or the reader fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from pathlib import Path

import grpc
import grpc.aio

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.api.protowire import decode_varint
from batteryop.client import _wire

EXEC_METHOD = "/microvmexec.services.api.v1alpha1.MicroVMExec/ExecCommand"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stdout_bytes(message: bytes) -> int:
    """The stdout bytes of a message that is only a stdout field (field 1, length-delimited),
    from its length prefix; 0 for any other message."""
    if not message or message[0] != 0x0A:
        return 0
    size, at = decode_varint(message, 1)
    return size if at + size == len(message) else 0


async def read_once(
    channel: grpc.aio.Channel, start: bytes, metadata: tuple[tuple[str, str], ...]
) -> dict[str, float | int]:
    began, cpu = time.perf_counter(), cpu_seconds()
    call = channel.stream_stream(EXEC_METHOD)(metadata=metadata, timeout=300)
    await call.write(start)
    await call.done_writing()
    total = messages = 0
    last = b""
    while True:
        message = await call.read()
        if message is grpc.aio.EOF:
            break
        messages += 1
        total += stdout_bytes(message)
        last = message
    seconds, cpu = time.perf_counter() - began, cpu_seconds() - cpu
    if _wire.decode_response(last) != (_wire.EXIT_CODE, 0):
        raise SystemExit(f"the stream did not end with exit code 0: {last[:40]!r}")
    return {"seconds": seconds, "cpu_seconds": cpu, "stdout_bytes": total, "messages": messages}


async def main(args: argparse.Namespace) -> None:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=Path(args.ca).read_bytes(),
        private_key=Path(args.key).read_bytes() if args.key else None,
        certificate_chain=Path(args.cert).read_bytes() if args.cert else None,
    )
    metadata: tuple[tuple[str, str], ...] = ()
    if args.token_file:
        metadata = (("authorization", f"Bearer {Path(args.token_file).read_text().strip()}"),)
    start = microvmexec_pb2.ExecCommandRequest(
        start=microvmexec_pb2.ExecStart(uid=args.uid, cmd=args.cmd)
    ).SerializeToString()
    options = [("grpc.max_receive_message_length", -1)]
    async with grpc.aio.secure_channel(args.target, credentials, options=options) as channel:
        await channel.channel_ready()
        for _ in range(args.runs):
            print(json.dumps(await read_once(channel, start, metadata)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--target", "--ca", "--uid"):
        parser.add_argument(flag, required=True)
    for flag in ("--cert", "--key", "--token-file"):
        parser.add_argument(flag)
    parser.add_argument("--cmd", default="stdout")
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
