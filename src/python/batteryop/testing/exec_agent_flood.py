"""A flood of exec calls with bad tokens, from its own process and its own source address.

    python -m batteryop.testing.exec_agent_flood --target 127.0.0.42:PORT --ca ca.crt \\
        --source 127.0.0.43 --calls 2000 --connections 50

Opens `--connections` TLS connections to the agent (each its own subchannel), through a TCP
relay in this process whose outgoing sockets are bound to `--source`: the agent sees the flood
come from that address, as it would from another machine, and not from the test's own
127.0.0.1. Sends `--calls` `ExecCommand` calls round robin over them, one at a time per
connection, each with a start message and a bad bearer token, in turn: a string that is no
JWT, a JWT for another audience, and a JWT for the agent's audience that nobody signed
(naming a claim's Secret, so that it could cost a claim read too). With `--token-file`, every
call carries that token instead (one identity's own, valid token: the flood of issue 43's finding
5), and the calls rotate over `ServerInfo` (answered), `GetMicroVM` and `ExecCommand` for a
MicroVM the token's claim does not hold (refused after the review and the claim read). Prints
one JSON line: `{"calls": n, "seconds": s, "codes": {"UNAUTHENTICATED": n, ...}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import grpc.aio
from google.protobuf import empty_pb2

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.api import names


def _part(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def bad_token(i: int) -> str:
    """The i-th bad token (see the module docstring)."""
    if i % 3 == 0:
        return f"not-a-jwt-{i}"
    exp = int(time.time()) + 600
    audience = names.EXEC_AGENT_AUDIENCE if i % 3 == 2 else "https://kubernetes.default"
    payload = {
        "aud": [audience],
        "exp": exp,
        "iat": exp - 600,
        "sub": "system:serviceaccount:default:sandbox",
        "kubernetes.io": {
            "namespace": "default",
            "secret": {"name": f"claim-{i}-exec", "uid": f"uid-{i}"},
        },
    }
    return f"{_part({'alg': 'RS256'})}.{_part(payload)}.bm8tc2lnbmF0dXJl"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def relay(target: str, source: str) -> asyncio.Server:
    """A TCP relay on 127.0.0.1 to `target`, its outgoing connections from `source`."""
    host, _, port = target.rpartition(":")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The connections end with the process: asyncio.run cancels them, and start_server's
        # callback would log each cancelled task as an error (a traceback per connection).
        with contextlib.suppress(asyncio.CancelledError):
            up_reader, up_writer = await asyncio.open_connection(
                host, int(port), local_addr=(source, 0)
            )
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return await asyncio.start_server(serve, "127.0.0.1", 0)


FLOOD_UID = "01FLOOD"
"""The MicroVM every flood call names: no claim holds it."""


async def unary_once(channel: grpc.aio.Channel, token: str, i: int) -> grpc.StatusCode:
    """`ServerInfo` (even i) or `GetMicroVM` for `FLOOD_UID` (odd i) with `token`."""
    stub = microvms_pb2_grpc.MicroVMStub(channel)
    metadata = (("authorization", f"Bearer {token}"),)
    try:
        if i % 2 == 0:
            await stub.ServerInfo(empty_pb2.Empty(), metadata=metadata, timeout=30)
        else:
            request = microvms_pb2.GetMicroVMRequest(uid=FLOOD_UID)
            await stub.GetMicroVM(request, metadata=metadata, timeout=30)
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK


async def call_once(stub: microvmexec_pb2_grpc.MicroVMExecStub, token: str) -> grpc.StatusCode:
    call = stub.ExecCommand(metadata=(("authorization", f"Bearer {token}"),), timeout=30)
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
        start = microvmexec_pb2.ExecStart(uid=FLOOD_UID, cmd="true")
        await call.write(microvmexec_pb2.ExecCommandRequest(start=start))
        await call.done_writing()
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK


async def flood(args: argparse.Namespace) -> dict[str, object]:
    server = await relay(args.target, args.source)
    port = server.sockets[0].getsockname()[1]
    credentials = grpc.ssl_channel_credentials(root_certificates=args.ca_pem)
    options = [
        ("grpc.ssl_target_name_override", args.target.rpartition(":")[0]),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    codes: collections.Counter[str] = collections.Counter()
    counter = iter(range(args.calls))
    channels = [
        grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options)
        for _ in range(args.connections)
    ]

    async def worker(channel: grpc.aio.Channel) -> None:
        stub = microvmexec_pb2_grpc.MicroVMExecStub(channel)
        for i in counter:
            if args.token is None:
                code = await call_once(stub, bad_token(i))
            elif i % 3 == 2:
                code = await call_once(stub, args.token)
            else:
                code = await unary_once(channel, args.token, i)
            codes[code.name] += 1

    started = time.monotonic()
    try:
        await asyncio.gather(*(worker(c) for c in channels))
    finally:
        for channel in channels:
            await channel.close()
        server.close()
    return {"calls": sum(codes.values()), "seconds": time.monotonic() - started, "codes": codes}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="exec_agent_flood")
    p.add_argument("--target", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--source", default="127.0.0.43")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--token-file", default="", help="one identity's token for every call")
    args = p.parse_args(argv)
    args.ca_pem = Path(args.ca).read_bytes()
    args.token = Path(args.token_file).read_text().strip() if args.token_file else None
    result = asyncio.run(flood(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
