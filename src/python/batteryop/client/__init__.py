"""battery-operator's client: claim a warm MicroVM from a Pool, run commands in it, release it.

    from batteryop.client import Client

    with Client(namespace="team-a", serving_ca="exec-agent-ca.crt") as client:
        with client.claim("demo", holder="sandbox", timeout=60) as claim:
            result = claim.exec(["uname", "-a"]).check()
            print(result.stdout.decode())

`AsyncClient` and `AsyncClaim` are the same API for asyncio (`async with`, `await`). The
`battery` command line (`batteryop.client.cli`) is built on the sync one.

Layout (after httpx): `_core` holds every IO-free rule, `_async` the IO, `_sync` the blocking
facade, `_transport` the exec transport Protocol and its gRPC form, `_models` the plain values,
`_exceptions` the error tree, `_mock` the public test double for exec (`MockExecTransport`:
consumers test their own code without an Exec Agent). Only the names below are public; each reports this module as its
home.

The wheel runs on CPython 3.10 to 3.13 (`Requires-Python: >=3.10`). It ships `batteryop.api`,
the vocabulary shared with the operator; that package takes `StrEnum` and `UTC` from
`batteryop.api._compat`, which is 3.11's own on 3.11 and newer and a small stand-in on 3.10.
"""

from batteryop.client._async import AsyncClaim, AsyncClient
from batteryop.client._exceptions import (
    ClaimError,
    ClaimTimeoutError,
    ClientError,
    CommandFailedError,
    ConfigError,
    ExecError,
    ExecPermissionError,
    ExecUnavailableError,
    HostNotReadyError,
    KubeAPIError,
    LeaseLostError,
    NoAgentAddressError,
    PoolExhaustedError,
    PoolNotFoundError,
)
from batteryop.client._mock import ExecCall, MockExecTransport
from batteryop.client._models import ClaimInfo, ExecResult, Pending, Timeouts
from batteryop.client._sync import Claim, Client
from batteryop.client._transport import ExecRequest, ExecTransport, GrpcExecTransport

__all__ = [
    "AsyncClaim",
    "AsyncClient",
    "Claim",
    "ClaimError",
    "ClaimInfo",
    "ClaimTimeoutError",
    "Client",
    "ClientError",
    "CommandFailedError",
    "ConfigError",
    "ExecCall",
    "ExecError",
    "ExecPermissionError",
    "ExecRequest",
    "ExecResult",
    "ExecTransport",
    "ExecUnavailableError",
    "GrpcExecTransport",
    "HostNotReadyError",
    "KubeAPIError",
    "LeaseLostError",
    "MockExecTransport",
    "NoAgentAddressError",
    "Pending",
    "PoolExhaustedError",
    "PoolNotFoundError",
    "Timeouts",
]

__locals = locals()
for __name in __all__:
    if not __name.startswith("__"):
        setattr(__locals[__name], "__module__", "batteryop.client")  # noqa: B010
