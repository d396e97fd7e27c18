"""`PoolDeps`: what a Pool reconcile uses besides the Pool body, shared by every reconcile.

Its own module so that the scope the steps share (`scope`) and the chain (`reconcile`) both
import it and neither imports the other (as `claims.deps`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from batteryop.api.clock import Clock
from batteryop.battery.protocol import BatteryAPI
from batteryop.operator.pools.demand import Demand
from batteryop.operator.pools.hosts import HostSet

_log = logging.getLogger("batteryop.operator.pools.reconcile")


@dataclass
class PoolDeps:
    """What a Pool reconcile uses besides the Pool body.

    - `battery`: battery's API (`BatteryClient` in production).
    - `hosts`: the Host set as last published, None until the host registry has published
      one; the runtime replaces it when a new one is published (PO-011).
    - `clock`: now, timezone-aware; read once per reconcile.
    - `demand`: the claims' arrivals and waiting counts per Pool, for the Pools that size
      themselves (RS-108, PO-107); `Inputs` keeps it.
    """

    battery: BatteryAPI
    hosts: HostSet | None
    clock: Clock
    logger: logging.Logger | logging.LoggerAdapter[Any] = _log
    demand: Demand = field(default_factory=Demand)
