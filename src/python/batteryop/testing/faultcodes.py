"""The gRPC status a fake's injected fault answers with, from itself or its name."""

from __future__ import annotations

import grpc


def status_code(value: str | grpc.StatusCode) -> grpc.StatusCode:
    """A non-OK gRPC status code from itself or its name ("UNAVAILABLE", any case).

    Raises ValueError for an unknown name, and for OK: a fault must fail the call.
    """
    if isinstance(value, grpc.StatusCode):
        code = value
    else:
        try:
            code = grpc.StatusCode[value.upper()]
        except KeyError:
            raise ValueError(f"unknown gRPC status code {value!r}") from None
    if code == grpc.StatusCode.OK:
        raise ValueError("a fault needs a non-OK status code")
    return code
