"""What the operator's controller tests share: fake Hosts, clients, bodies, and the runtime's part.

The Pool and claim controllers are tested the same way: a `FakeBattery` per test, in process,
on fake flintlockd Hosts started once per module (`flintlock_hosts`), reached through the real
`BatteryClient` (`battery_config`); the battery calls a reconcile makes are recorded by a
`CallLog` on its client. Reconciles are driven with dict bodies (`pool_body` for Pools), and
`apply_outcome` writes an `Outcome` back into a body as the runtime would (finalizer added,
status merge-patched, finalizer removed), so a test can loop reconcile -> apply -> reconcile.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

from batteryop.api import names, samples
from batteryop.battery import BatteryConfig, ReconnectPolicy
from batteryop.operator.outcome import Outcome
from batteryop.testing.fake_flintlock import FakeFlintlockd

HOST_NAMES = ("host-a", "host-b")


@contextlib.asynccontextmanager
async def flintlock_hosts(
    host_names: tuple[str, ...] = HOST_NAMES,
) -> AsyncIterator[dict[str, FakeFlintlockd]]:
    """One fake flintlockd process per name, on loopback, for the block's duration."""
    async with contextlib.AsyncExitStack() as stack:
        yield {
            name: await stack.enter_async_context(FakeFlintlockd.start(address="127.0.0.1"))
            for name in host_names
        }


class CallLog:
    """A `CallObserver` keeping the names of the battery calls a client made."""

    def __init__(self) -> None:
        self.rpcs: list[str] = []

    def on_call(self, rpc: str, code: str, seconds: float) -> None:
        self.rpcs.append(rpc)

    def take(self) -> list[str]:
        taken, self.rpcs = self.rpcs, []
        return taken


def battery_config(target: str) -> BatteryConfig:
    """A client config for a fake battery: short deadlines, fast reconnects."""
    return BatteryConfig(
        target=target,
        call_timeout=timedelta(seconds=5),
        reconnect=ReconnectPolicy(
            initial=timedelta(milliseconds=10), maximum=timedelta(milliseconds=50)
        ),
    )


def pool_body(
    namespace: str,
    *,
    name: str = "pool",
    size: int = 2,
    selector: dict[str, str] | None = None,
    finalizer: bool = True,
) -> dict[str, Any]:
    """The sample Pool (Tap interface, amd64 Hosts) as the API server would return it."""
    body = samples.sample_pool(name=name, namespace=namespace)
    body["spec"]["size"] = size
    # flintlockd requires a volume id; the sample leaves it to the user.
    body["spec"]["template"]["rootVolume"]["id"] = "root"
    if selector is not None:
        body["spec"]["placement"] = {"nodeSelector": selector}
    body["metadata"].update(uid=str(uuid.uuid4()), generation=1, resourceVersion="1")
    if finalizer:
        body["metadata"]["finalizers"] = [names.POOL_FINALIZER]
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, `None` deletes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def apply_outcome(body: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """`body` after the runtime applied `outcome`: finalizer added, status patched, finalizer
    removed (events and the requeue leave the body as it is)."""
    out = copy.deepcopy(dict(body))
    meta = out.setdefault("metadata", {})
    if outcome.add_finalizer is not None:
        meta["finalizers"] = [*meta.get("finalizers", []), outcome.add_finalizer]
    if outcome.status is not None:
        status = merge_patch(out.get("status") or {}, outcome.status)
        out["status"] = status
    if outcome.remove_finalizer is not None:
        meta["finalizers"] = [
            f for f in meta.get("finalizers", []) if f != outcome.remove_finalizer
        ]
    return out
