"""A reconcile as a chain of steps over one scope: the shape every controller shares.

A controller's reconcile builds a scope (the object as read, the working status, the
`Outcome` being built, whether the chain has stopped) and runs two tuples of steps over it:

- `chain`: in order, until a step stops it (`scope.stopped`);
- `last`: always, after the chain, stopped or not (a claim's `synced`, a Pool's
  `answered`), so the report of this reconcile's battery call is never skipped.

Each step is an async function of the scope, in its own module. The operator's steps never
write to the API server and never raise for a battery failure: they record what they decided
in the scope (the host registry's write their ConfigMap themselves, ordered against battery
calls: `host_registry/inventory/scope.py`). The two tuples are the one definition of a
controller's order: the reconcile runs them, and the documentation renders them
(`docs/operator.md`, `docs/host-registry.md`, through `batteryop.docsite`). It lives beside
`kube.informer` and `kube.workqueue` so that every deployable's controllers take this shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from batteryop.api.conditions import EventType
from batteryop.kube.outcome import Outcome


@dataclass(kw_only=True)
class Scope:
    """What every controller's scope holds for the chain: the `Outcome` being built and
    whether a step stopped the chain. `ClaimScope` and `PoolScope` add the object as read,
    the working status and what their own steps record."""

    outcome: Outcome = field(default_factory=Outcome)
    stopped: bool = False

    def stop(self) -> None:
        """End the chain here; the `last` steps still run."""
        self.stopped = True

    def event(self, type: EventType, reason: str, message: str) -> None:
        """A Kubernetes Event about the object, recorded in the Outcome."""
        self.outcome.event(type, reason, message)


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
