"""Errors of the battery client, and the one place gRPC failures become them.

Callers branch on these classes and never see gRPC: every call of `BatteryClient` runs inside
`rpc_boundary`, which turns a failed call into one of the classes below, chained to the gRPC
error with `raise ... from`. Each error carries the RPC's name (`rpc`, e.g. ``"ClaimVM"``),
the gRPC status code's name (`code`, e.g. ``"NOT_FOUND"``) and battery's message.

    Exception
    ├── BatteryError                     a battery call failed: .rpc, .code, .message
    │   ├── BatteryNotFoundError         NOT_FOUND: no such Pool, Lease or Host
    │   ├── AlreadyExistsError           ALREADY_EXISTS: CreatePool / AddHost of a known name
    │   ├── InvalidArgumentError         INVALID_ARGUMENT, OUT_OF_RANGE: battery refused the request
    │   ├── PreconditionFailedError      FAILED_PRECONDITION: e.g. DeletePool of a Pool with leased
    │   │                                MicroVMs, cordoning an unregistered Host
    │   ├── BatteryPoolExhaustedError    RESOURCE_EXHAUSTED: no AVAILABLE MicroVM to claim
    │   ├── ClaimAbortedError            ABORTED: the Lease's MicroVM is being deleted; retry later
    │   ├── UnimplementedError           UNIMPLEMENTED: this battery lacks the RPC (AddHost and
    │   │                                friends on v0.4.0); the host registry falls back on it
    │   ├── AccessDeniedError            UNAUTHENTICATED, PERMISSION_DENIED: token missing or wrong
    │   ├── BatteryInternalError         INTERNAL, UNKNOWN, DATA_LOSS, or an answer this client
    │   │                                cannot read: battery failed, the outcome is its own
    │   └── BatteryUnavailableError      UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED in transit, no
    │                                    connection, closed client: battery unavailable or the
    │                                    call failed in transit; the outcome is unknown
    └── ValueError
        └── BatteryConfigError           a BatteryConfig field is invalid: .field

A caller's own cancellation (its task was cancelled) is never mapped: `asyncio.CancelledError`
passes through untouched. A CANCELLED status, or a call cancelled because its channel was
closed, is mapped to `BatteryUnavailableError`.

Requirements: DP-011 (gRPC codes mapped to errors that tell a missing object, an exhausted
Pool and an unavailable battery apart), CL-062 (ABORTED is its own class).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import grpc
import grpc.aio

IN_TRANSIT = "battery unavailable or the call failed in transit; the outcome is unknown"


class BatteryError(Exception):
    """A battery call failed; `rpc`, `code` and `message` say which, how and why."""

    def __init__(self, rpc: str, code: str, message: str) -> None:
        super().__init__(rpc, code, message)
        self.rpc = rpc
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"battery {self.rpc} failed with {self.code}: {self.message or '(no message)'}"


class BatteryNotFoundError(BatteryError):
    """battery does not know the Pool, Lease or Host named in the request (NOT_FOUND)."""


class AlreadyExistsError(BatteryError):
    """The object to create exists already (ALREADY_EXISTS)."""


class InvalidArgumentError(BatteryError):
    """battery refused the request as malformed (INVALID_ARGUMENT, OUT_OF_RANGE)."""


class PreconditionFailedError(BatteryError):
    """battery's state forbids the call now (FAILED_PRECONDITION)."""


class BatteryPoolExhaustedError(BatteryError):
    """The Pool has no AVAILABLE MicroVM to lease (RESOURCE_EXHAUSTED)."""


class ClaimAbortedError(BatteryError):
    """The Lease found for the request id is ending; claim again later (ABORTED, CL-062)."""


class UnimplementedError(BatteryError):
    """This battery does not implement the RPC (UNIMPLEMENTED)."""


class AccessDeniedError(BatteryError):
    """battery refused the caller's credentials (UNAUTHENTICATED, PERMISSION_DENIED)."""


class BatteryInternalError(BatteryError):
    """battery failed while handling the call, or answered something unreadable."""


class BatteryUnavailableError(BatteryError):
    """battery unavailable or the call failed in transit; the outcome is unknown.

    The request may or may not have taken effect: retry only calls that are safe to repeat
    (ClaimVM is, with the same request id: CL-061).
    """

    def __str__(self) -> str:
        return f"{super().__str__()} ({IN_TRANSIT})"


class BatteryConfigError(ValueError):
    """A `BatteryConfig` field (named by `field`) holds an invalid value."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"battery client config: {self.field}: {self.problem}"


_BY_CODE: dict[grpc.StatusCode, type[BatteryError]] = {
    grpc.StatusCode.NOT_FOUND: BatteryNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: PreconditionFailedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BatteryPoolExhaustedError,
    grpc.StatusCode.ABORTED: ClaimAbortedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.UNAUTHENTICATED: AccessDeniedError,
    grpc.StatusCode.PERMISSION_DENIED: AccessDeniedError,
    grpc.StatusCode.INTERNAL: BatteryInternalError,
    grpc.StatusCode.UNKNOWN: BatteryInternalError,
    grpc.StatusCode.DATA_LOSS: BatteryInternalError,
    # DP-011: everything that leaves the outcome unknown is "unavailable".
    grpc.StatusCode.UNAVAILABLE: BatteryUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: BatteryUnavailableError,
    grpc.StatusCode.CANCELLED: BatteryUnavailableError,
}


def error_class(code: grpc.StatusCode) -> type[BatteryError]:
    """The error class for a non-OK status code."""
    return _BY_CODE.get(code, BatteryInternalError)


def from_rpc_error(rpc: str, err: grpc.RpcError) -> BatteryError:
    """The `BatteryError` for a failed gRPC call (not raised; the caller chains it)."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else None
    if not isinstance(code, grpc.StatusCode):
        return BatteryInternalError(rpc, "UNKNOWN", str(err))
    return error_class(code)(rpc, code.name, details or "")


@contextlib.contextmanager
def rpc_boundary(rpc: str) -> Iterator[None]:
    """Turn whatever gRPC raises inside the block into a `BatteryError` for `rpc`."""
    try:
        yield
    except BatteryError:
        raise
    except grpc.RpcError as err:
        raise from_rpc_error(rpc, err) from err
    except grpc.aio.UsageError as err:
        # The channel was closed under the call (the client is shutting down).
        raise BatteryUnavailableError(rpc, "CANCELLED", f"the channel is closed: {err}") from err
    except asyncio.CancelledError as err:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # the caller's own cancellation
        # grpc.aio raises CancelledError in a task nobody cancelled when the call itself was
        # cancelled, e.g. by closing its channel: the outcome is unknown.
        raise BatteryUnavailableError(rpc, "CANCELLED", "the call was cancelled locally") from err
