"""Threads the client starts, made deaf to the signals that stop the program.

Python runs a signal handler only on the main thread, and only between two bytecodes. The
kernel, though, hands a signal sent to the process (Ctrl-C's SIGINT, say) to any thread that
does not block it. When it lands on one of ours, the main thread is not woken: if it is waiting
on a lock with no timeout (`Future.result()` while a command runs), the handler never runs and
Ctrl-C does nothing, so the claim is not released (CC-108). Seen once in CI under load.

So every thread the client starts blocks SIGINT and SIGTERM. A thread inherits its creator's
mask, so the mask is set on the creating thread just around `start()`: the new thread has it
from its first instruction (no window in which a signal could land there), and so does every
thread it starts in turn (gRPC's core threads and asyncio's executor threads are started from
the event loop's thread). Where `pthread_sigmask` does not exist (Windows) signals go to the
main thread anyway.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

STOP_SIGNALS: frozenset[int] = frozenset({signal.SIGINT, signal.SIGTERM})


def start_daemon(target: Callable[[], object], name: str) -> threading.Thread:
    """Start `target` on a daemon thread named `name` that blocks `STOP_SIGNALS`."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return thread
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread
