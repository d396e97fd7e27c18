"""The hook through which a deployable observes battery calls (latency, outcome).

The client calls `on_call` once per finished unary call, and once per ended Events stream
attempt (rpc ``"Subscribe"``, seconds = how long the stream stayed open), so an entry point
can export metrics without this package importing a metrics library.
"""

from __future__ import annotations

import logging
from typing import Protocol

_log = logging.getLogger(__name__)


class CallObserver(Protocol):
    def on_call(self, rpc: str, code: str, seconds: float) -> None:
        """`rpc` is the method name (``"ClaimVM"``), `code` the gRPC code name (``"OK"``)."""


def notify(observer: CallObserver | None, rpc: str, code: str, seconds: float) -> None:
    """Report a call; an observer's own failure is logged, never raised into the call."""
    if observer is None:
        return
    try:
        observer.on_call(rpc, code, seconds)
    except Exception:
        _log.exception("battery call observer failed", extra={"rpc": rpc, "code": code})
