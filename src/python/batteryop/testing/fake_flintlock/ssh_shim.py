"""`python -m batteryop.testing.fake_flintlock.ssh_shim TARGET UID`: an ssh `ProxyCommand` for
tests, over a plaintext `MicroVMSSHProxy` stream to TARGET (flintlock-api.md §8.4, TD-013).

It sends `uid`, then what it reads from stdin as `data` requests, and writes every response's
bytes to stdout; the end of stdin is its half-close. It exits 0 when the RPC ends OK, and 1
with the status on stderr otherwise. `testkit.ssh_command` builds an `ssh` command line on it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence

import grpc

from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import (
    microvmsshproxy_pb2,
    microvmsshproxy_pb2_grpc,
)

Request = microvmsshproxy_pb2.SSHProxyRequest
CHUNK_BYTES = 32 * 1024


def requests(uid: str) -> Iterator[Request]:
    yield Request(uid=uid)
    while chunk := os.read(sys.stdin.fileno(), CHUNK_BYTES):
        yield Request(data=chunk)


def main(argv: Sequence[str] | None = None) -> int:
    target, uid = argv if argv is not None else sys.argv[1:]
    out = sys.stdout.buffer
    with grpc.insecure_channel(target) as channel:
        stub = microvmsshproxy_pb2_grpc.MicroVMSSHProxyStub(channel)
        try:
            for response in stub.SSHProxy(requests(uid)):
                out.write(response.data)
                out.flush()
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            print(f"ssh_shim: {code}: {details}", file=sys.stderr, flush=True)
            return 1
        except BrokenPipeError:
            return 1
    return 0


if __name__ == "__main__":
    # The request thread may still be blocked reading stdin: leave without waiting for it.
    os._exit(main())
