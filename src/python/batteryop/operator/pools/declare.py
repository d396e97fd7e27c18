"""declare: battery holds the Pool's current spec on the Hosts its selector picks.

Order, for a Pool that has its finalizer and is not being deleted:

1. GetPool: what battery holds now (NotFound: nothing). One call, and the only one when
   nothing changed: the answer also carries the counts `status` writes (PO-020).
2. Resolve `spec.placement.nodeSelector` against the published `HostSet`: the selected
   Hosts become `flintlock_hosts` (PO-010). None selected is no error here: battery still
   gets the Pool, on no Host, and `status` says NoEligibleHost (PO-012); a later Host set
   that selects one sends an UpdatePool (PO-011).
3. CreatePool when battery does not hold the Pool; UpdatePool when the Pool's generation is
   not the one battery last accepted (`status.observedGeneration`), or battery's spec differs
   from the one wanted (another Host set, PO-011, or a spec changed behind our back). After
   battery accepts, `observedGeneration` is the Pool's generation (PO-002).
4. battery refusing the spec (INVALID_ARGUMENT, FAILED_PRECONDITION) is an answer, not an
   error: `status` shows Ready=False Rejected with battery's message (PO-004), and
   `observedGeneration` stays where it was, so the next reconcile sends it again.

Until the host registry has published a Host set, nothing is created or updated: the Pool
is only read (PO-101). Other battery failures end the chain (`PoolScope.failed`) for `answered`
to report.
"""

from __future__ import annotations

import logging
from typing import Any

from batteryop.api.pool import Pool
from batteryop.battery import models as battery
from batteryop.battery.errors import (
    AlreadyExistsError,
    BatteryError,
    BatteryNotFoundError,
    InvalidArgumentError,
    PreconditionFailedError,
)
from batteryop.battery.protocol import BatteryAPI
from batteryop.operator.pools.battery_spec import to_battery_spec
from batteryop.operator.pools.hosts import HostSet
from batteryop.operator.pools.scope import Declared, PoolScope


async def declare(scope: PoolScope) -> None:
    """The step: `declare_pool` with the scope's Pool and Host set; what battery holds goes
    to `scope.declared` for `status`."""
    try:
        scope.declared = await declare_pool(
            scope.pool,
            scope.deps.hosts,
            scope.deps.battery,
            scope.logger,
            size=None if scope.sizing is None else scope.sizing.size,
        )
    except BatteryError as err:
        scope.failed(err)


async def get_held(api: BatteryAPI, ref: battery.PoolRef) -> battery.Pool | None:
    """battery's Pool, or None if battery does not hold it."""
    try:
        return await api.get_pool(ref)
    except BatteryNotFoundError:
        return None


async def declare_pool(
    pool: Pool,
    hosts: HostSet | None,
    api: BatteryAPI,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    *,
    size: int | None = None,
) -> Declared:
    """Make battery hold `pool`'s spec on its selected Hosts, of `size` (spec.size when None);
    report what battery holds.

    Calls: GetPool, then CreatePool or UpdatePool only when something changed.
    Raises the battery client's errors other than NotFound, AlreadyExists and refusals.
    """
    ref = battery.PoolRef(namespace=pool.namespace, name=pool.name)
    held = await get_held(api, ref)
    if hosts is None:
        selected = held.spec.flintlock_hosts if held is not None else ()
        return Declared(held, pool.status.observed_generation, selected, hosts_published=False)

    selected = hosts.matching(pool.spec.node_selector)  # PO-010
    wanted = to_battery_spec(pool, selected, size)  # PO-107: the policy's size, if any
    generation = pool.metadata.generation
    if (
        held is not None
        and held.spec == wanted  # PO-011: the same Hosts, and nothing changed in battery
        and pool.status.observed_generation == generation  # PO-002
    ):
        return Declared(held, generation, selected)

    try:
        held = await _send(api, wanted, exists=held is not None)
    except (InvalidArgumentError, PreconditionFailedError) as err:
        # PO-004: battery's refusal, in battery's words.
        logger.warning(
            "battery refused Pool spec",
            extra={"pool": str(ref), "generation": generation, "error": str(err)},
        )
        return Declared(
            held, pool.status.observed_generation, selected, rejected=err.message or str(err)
        )
    logger.info(
        "Declared Pool in battery",
        extra={"pool": str(ref), "generation": generation, "hosts": ",".join(selected)},
    )
    return Declared(held, generation, selected)  # PO-002


async def _send(api: BatteryAPI, wanted: battery.PoolSpec, *, exists: bool) -> battery.Pool:
    """UpdatePool if battery held the Pool at GetPool, else CreatePool; each falls back to
    the other when battery's state changed in between (both calls replace the whole spec)."""
    if exists:
        try:
            return await api.update_pool(wanted)
        except BatteryNotFoundError:
            return await api.create_pool(wanted)
    try:
        return await api.create_pool(wanted)
    except AlreadyExistsError:
        return await api.update_pool(wanted)
