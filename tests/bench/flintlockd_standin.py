"""A flintlockd stand-in that is never the bottleneck of a throughput figure.

It serves what the Exec Agent calls on flintlockd (`GetMicroVM`, `ExecCommand`) over mutual
TLS, as the fake flintlockd does, but runs no command: every `ExecCommand` answers its start
with `--mib` MiB of stdout in messages of `--chunk-bytes` (by default `CHUNK_BYTES`, the fake's
and flintlock's own chunk size, so the agent sees as many messages as from a real command),
built once, then exit code 0. It runs as its own process, so its CPU is not the agent's:

    python -m bench.flintlockd_standin --address 127.0.0.43 --cert F --key F --client-ca F \
        [--mib 100] [--chunk-bytes 32768]

It prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)

CHUNK_BYTES = 32 * 1024
"""The stdout bytes of one message, as flintlockd sends them (batteryop.testing.fake_flintlock)."""


class MicroVMs(microvms_pb2_grpc.MicroVMServicer):
    async def GetMicroVM(  # (gRPC's name)
        self, request: microvms_pb2.GetMicroVMRequest, context: grpc.aio.ServicerContext
    ) -> microvms_pb2.GetMicroVMResponse:
        return microvms_pb2.GetMicroVMResponse()


class Exec(microvmexec_pb2_grpc.MicroVMExecServicer):
    def __init__(self, mib: int, chunk_bytes: int) -> None:
        self._chunk = microvmexec_pb2.ExecCommandResponse(stdout=b"\0" * chunk_bytes)
        self._count = mib * 1024 * 1024 // chunk_bytes

    async def ExecCommand(  # (gRPC's name)
        self,
        requests: AsyncIterator[microvmexec_pb2.ExecCommandRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[microvmexec_pb2.ExecCommandResponse]:
        start = await anext(requests)
        assert start.WhichOneof("payload") == "start"
        for _ in range(self._count if start.start.cmd != "true" else 0):
            yield self._chunk
        yield microvmexec_pb2.ExecCommandResponse(exit_code=0)


async def serve(args: argparse.Namespace) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ]
    )
    # The stand-in serves only what the agent calls; the other MicroVM methods stay UNIMPLEMENTED.
    microvms_pb2_grpc.add_MicroVMServicer_to_server(MicroVMs(), server)  # type: ignore[abstract]
    microvmexec_pb2_grpc.add_MicroVMExecServicer_to_server(Exec(args.mib, args.chunk_bytes), server)
    credentials = grpc.ssl_server_credentials(
        [(Path(args.key).read_bytes(), Path(args.cert).read_bytes())],
        root_certificates=Path(args.client_ca).read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port(f"{args.address}:0", credentials)
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--address", "--cert", "--key", "--client-ca"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
