"""What the operator's controller tests share: fake Hosts, clients, bodies, and the runtime's part.

The Pool and claim controllers are tested the same way: a `FakeBattery` per test, in process,
on fake flintlockd Hosts started once per module (`flintlock_hosts`), reached through the real
`BatteryClient` (`battery_config`); the battery calls a reconcile makes are recorded by a
`CallLog` on its client. Reconciles are driven with dict bodies (`pool_body` for Pools), and
`apply_outcome` has the runtime's own `Controller.apply` write an `Outcome` to an in-memory API
server holding the body, so a test can loop reconcile -> apply -> reconcile.
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
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import CLAIMS, POOLS
from batteryop.operator.runtime import Controller, key_of
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.fake_kube import FakeKube, RecordingRecorder

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


async def _not_reconciled(body: Mapping[str, Any]) -> Outcome:
    raise AssertionError("apply_outcome applies; it does not reconcile")


async def apply_outcome(body: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """`body` after the runtime applied `outcome` to an API server holding `body`.

    The real `Controller.apply` writes it, to an in-memory API server (`FakeKube`): the
    finalizer add alone, or status, then the finalizer removal. What comes back is the stored
    body, or, if the writes deleted the object, its last body. Events and the requeue leave
    the body as it is.
    """
    resource = CLAIMS if body.get("kind") == names.CLAIM_KIND else POOLS
    kube = FakeKube()
    kube.seed(resource, body)
    controller = Controller(
        "apply", resource, _not_reconciled, kube=kube, recorder=RecordingRecorder(), workers=1
    )
    key = key_of(body)
    await controller.apply(key, body, outcome)
    stored = (resource.plural, key[0], key[1])
    return copy.deepcopy(kube.objects.get(stored) or kube.gone[stored])
