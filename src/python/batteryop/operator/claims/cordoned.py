"""cordoned: no claim binds to a MicroVM on a cordoned Host (CL-103, CL-104).

`kubectl cordon` of a Host's Node makes the host registry call battery's `CordonHost` (IN-100)
and take the Host out of the published Host set, so the Pool controller drops it from every
Pool's `flintlock_hosts`. Both stop new *placements* only (BA-105): battery v0.4.0's `ClaimVM`
still hands out any AVAILABLE MicroVM of the Pool, one on the cordoned Host included (BA-114).

Why the operator checks each answer instead of something retiring those MicroVMs first:
battery's API cannot retire one AVAILABLE MicroVM, and nothing outside battery can do it
without racing a claim.

- battery has no per-MicroVM delete (#103) and no RPC that lists a Pool's MicroVMs or their
  Hosts (`ListHosts` only counts them); `ClaimVM` cannot be aimed at a Host (it takes any
  AVAILABLE MicroVM); `UpdatePool` and `CordonHost` leave existing MicroVMs as they are;
  `DeletePool` drains every Host of the Pool and is refused while any MicroVM is leased
  (`force` ends those Leases).
- flintlock's `DeleteMicroVM` destroys a MicroVM, found by `ListMicroVMs` on the Host less the
  `ListLeases` vm uids, but unconditionally: a `ClaimVM` that takes it between that listing
  and the delete gets it destroyed under its new Lease. battery keeps its row AVAILABLE
  besides, and later hands it out dead (with no pre-lease hook to fail, `ClaimVM` succeeds).

A MicroVM battery has leased to this claim's own `ClaimVM` is the one the operator can retire
without a race: no other claim can hold it. So `claim_off_cordoned` looks up the Host of each
`ClaimVM` answer in the operator's Node cache (`ClaimDeps.node`); on a cordoned Node
(`spec.unschedulable`) it gives the Lease back with `ReleaseVM` at once, before any status
write (battery destroys the MicroVM, and the Pool refills on Hosts not cordoned), and claims
again with the same request id, which battery answers afresh once the Lease is gone (BA-101).
Each give-back retires one of the cordoned Host's warm MicroVMs; those no claim draws stay
until the Pool is deleted or the Host is uncordoned.

At most `GIVE_BACKS` give-backs per reconcile (`CordonedHostsError`), so one reconcile never
holds a ClaimVM slot for long; a failed give-back is `GiveBackFailedError` (the next reconcile's
`ClaimVM` replays that Lease, to be given back again, or answers ABORTED while battery deletes
its MicroVM, CL-062). `bind` turns both into Pending `HostCordoned`.

The window that remains: the check reads the operator's Node cache. A cordon that the
operator's Node watch has not delivered when a `ClaimVM` answer is checked is not seen, and
that claim binds on the Host (the drain guard then holds the drain for it like for any claim
Bound before the cordon, EA-040). The window is the Node watch's delivery lag behind the
claim's own watch, normally milliseconds; a fresh GET of the Node per bind would close it at
the price of an API round trip on every warm bind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from batteryop.battery.errors import BatteryError, BatteryNotFoundError
from batteryop.battery.models import ClaimedVM, PoolRef

GIVE_BACKS: Final = 3
"""How many ClaimVM answers on cordoned Hosts one reconcile gives back before it waits."""


class Leases(Protocol):
    """The two battery calls this needs (`BatteryAPI` has them)."""

    async def claim_vm(self, pool: PoolRef, *, request_id: str) -> ClaimedVM: ...

    async def release_vm(self, lease_id: str) -> None: ...


class CordonedHostsError(Exception):
    """Every ClaimVM of this reconcile answered a MicroVM on a cordoned Host; each was given
    back."""

    def __init__(self, given_back: list[ClaimedVM]) -> None:
        hosts = ", ".join(sorted({c.host.name for c in given_back}))
        super().__init__(
            f"battery leased {len(given_back)} MicroVMs on cordoned Hosts ({hosts}); "
            "gave them back, retrying"
        )
        self.given_back = given_back


class GiveBackFailedError(Exception):
    """ReleaseVM of a Lease on a cordoned Host failed; `error` is battery's answer."""

    def __init__(self, claimed: ClaimedVM, error: BatteryError) -> None:
        super().__init__(
            f"MicroVM {claimed.vm_uid} is on cordoned Host {claimed.host.name}; giving its "
            f"Lease back failed, retrying: {error}"
        )
        self.claimed = claimed
        self.error = error


def node_cordoned(node: Mapping[str, Any] | None) -> bool:
    """Whether the Node is cordoned (`spec.unschedulable`); an unknown Node is not."""
    return bool(((node or {}).get("spec") or {}).get("unschedulable"))


async def claim_off_cordoned(
    battery: Leases,
    pool: PoolRef,
    *,
    request_id: str,
    node: Callable[[str], Mapping[str, Any] | None],
    given_back: list[ClaimedVM] | None = None,
    attempts: int = GIVE_BACKS,
) -> ClaimedVM:
    """ClaimVM until battery answers a MicroVM on a Host whose Node is not cordoned.

    Raises what ClaimVM raises, `GiveBackFailedError` or `CordonedHostsError`. Each Lease given
    back is appended to `given_back` when one is passed (for the caller's log)."""
    returned = given_back if given_back is not None else []
    start = len(returned)
    for _ in range(attempts):
        claimed = await battery.claim_vm(pool, request_id=request_id)
        if not node_cordoned(node(claimed.host.name)):
            return claimed
        try:
            await battery.release_vm(claimed.lease_id)  # CL-103: battery destroys the MicroVM
        except BatteryNotFoundError:
            pass  # the Lease is gone already: what the give-back wanted
        except BatteryError as err:
            raise GiveBackFailedError(claimed, err) from err  # CL-104
        returned.append(claimed)
    raise CordonedHostsError(returned[start:])


__all__ = [
    "GIVE_BACKS",
    "CordonedHostsError",
    "GiveBackFailedError",
    "Leases",
    "claim_off_cordoned",
    "node_cordoned",
]
