"""A reconcile as a chain of steps over one scope: the shape both controllers share.

A controller's reconcile builds a scope (the object as read, the working status, the
`Outcome` being built, whether the chain has stopped) and runs two tuples of steps over it:

- `chain`: in order, until a step stops it (`scope.stopped`);
- `last`: always, after the chain, stopped or not (a claim's `synced`, a Pool's
  `answered`), so the report of this reconcile's battery call is never skipped.

Each step is an async function of the scope, in its own module, that never writes to the API
server and never raises for a battery failure: it records what it decided in the scope. The
two tuples are the one definition of a controller's order: the reconcile runs them, and the
documentation renders them (`docs/operator.md`, through `docs_hook.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar


class Scope(Protocol):
    stopped: bool


S = TypeVar("S", bound=Scope)

Step = Callable[[S], Awaitable[None]]


async def run_chain(scope: S, chain: Sequence[Step[S]], last: Sequence[Step[S]]) -> None:
    """Run `chain` until a step stops it, then every step of `last`."""
    for step in chain:
        if scope.stopped:
            break
        await step(scope)
    for step in last:
        await step(scope)


__all__ = ["Scope", "Step", "run_chain"]
