"""battery-operator's client: claim a warm MicroVM from a Pool, run commands in it, release it.

    from batteryop.client import Client

    with Client(namespace="team-a", serving_ca="exec-agent-ca.crt") as client:
        with client.claim("demo", holder="sandbox", timeout=60) as claim:
            result = claim.exec(["uname", "-a"]).check()
            print(result.stdout.decode())

`AsyncClient` and `AsyncClaim` are the same API for asyncio (`async with`, `await`). The
`battery` command line (`batteryop.client.cli`) is built on the sync one.

Layout (after httpx): `_core` holds every IO-free rule, `_async` the IO, `_sync` the blocking
facade, `_exec` the exec transport Protocol, `_transport` its gRPC form, `_wire` the exec
stream's messages on the wire, `_models` the plain
values, `_exceptions` the error tree, `_mock` the public test double for exec
(`MockExecTransport`: consumers test their own code without an Exec Agent). Only the names
below are public; each reports this module as its home. The ones whose modules bring asyncio,
PyYAML and gRPC are imported on first use, so that `battery --help` loads none of them
(protobuf the client never imports: `_wire` encodes the exec stream's messages).

The wheel runs on CPython 3.10 to 3.13 (`Requires-Python: >=3.10`). It ships `batteryop.api`,
the vocabulary shared with the operator; that package takes `StrEnum` and `UTC` from
`batteryop.api._compat`, which is 3.11's own on 3.11 and newer and a small stand-in on 3.10.
"""

import typing

from batteryop.client._exceptions import (
    ClaimError,
    ClaimTimeoutError,
    ClientError,
    CommandFailedError,
    ConfigError,
    ExecError,
    ExecPermissionError,
    ExecUnavailableError,
    FileTransferError,
    HostNotReadyError,
    KubeAPIError,
    LeaseLostError,
    NoAgentAddressError,
    PoolExhaustedError,
    PoolNotFoundError,
    ShellError,
)
from batteryop.client._models import ClaimInfo, ExecResult, Pending, Timeouts

if typing.TYPE_CHECKING:
    from batteryop.client._async import AsyncClaim, AsyncClient
    from batteryop.client._exec import ExecRequest, ExecTransport
    from batteryop.client._mock import ExecCall, MockExecTransport
    from batteryop.client._sync import Claim, Client
    from batteryop.client._transport import GrpcExecTransport

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
    "FileTransferError",
    "GrpcExecTransport",
    "HostNotReadyError",
    "KubeAPIError",
    "LeaseLostError",
    "MockExecTransport",
    "NoAgentAddressError",
    "Pending",
    "PoolExhaustedError",
    "PoolNotFoundError",
    "ShellError",
    "Timeouts",
]


_LAZY = {
    "AsyncClaim": "_async",
    "AsyncClient": "_async",
    "Claim": "_sync",
    "Client": "_sync",
    "ExecCall": "_mock",
    "ExecRequest": "_exec",
    "ExecTransport": "_exec",
    "GrpcExecTransport": "_transport",
    "MockExecTransport": "_mock",
}
"""The public names whose modules bring asyncio, PyYAML and gRPC, imported on first
use (PEP 562) so that `battery --help` and the other light paths never load them."""


def _publish(names: list[str], where: dict[str, typing.Any]) -> None:
    for name in names:
        value = where[name]
        value.__module__ = "batteryop.client"
        globals()[name] = value


def __getattr__(name: str) -> typing.Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    for module_name in sorted(set(_LAZY.values())):  # all at once, as an eager import did
        module = importlib.import_module(f"{__name__}.{module_name}")
        _publish([n for n, m in _LAZY.items() if m == module_name], vars(module))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_publish([n for n in __all__ if n not in _LAZY], globals())
