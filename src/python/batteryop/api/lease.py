"""A Pool's lease settings (`spec.lease`), on their own: what a Holder needs of its Pool.

`batteryop.api.pool` builds its `PoolSpec` with them; the client reads only these from the Pool
it claims from (`pool_lease`), so a `battery` command does not import the whole Pool model
(its dozen dataclasses took about 18 ms of every command's start; docs/dev/client-performance.md).

Requirements: CC-010 (the Holder renews at the Pool's heartbeat interval).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from batteryop.api._fields import Fields
from batteryop.api.times import format_duration

# The CRD's defaults (crds/pools.yaml); crds_test checks they agree.
DEFAULT_HEARTBEAT_INTERVAL: Final = timedelta(seconds=10)
DEFAULT_EXPIRY_THRESHOLD: Final = timedelta(seconds=30)
MIN_EXPIRY_THRESHOLD: Final = timedelta(seconds=2)
"""The shortest `spec.lease.expiryThreshold` the CRD admits (PO-104): every Lease battery hands
out lives at least this long after its ClaimVM (BA-003)."""


@dataclass(frozen=True)
class LeaseSettings:
    """How often a Holder renews (advisory for battery) and how long a Lease lives unrenewed."""

    heartbeat_interval: timedelta = DEFAULT_HEARTBEAT_INTERVAL
    expiry_threshold: timedelta = DEFAULT_EXPIRY_THRESHOLD

    @classmethod
    def parse(cls, f: Fields) -> LeaseSettings:
        return cls(
            heartbeat_interval=f.duration("heartbeatInterval", DEFAULT_HEARTBEAT_INTERVAL),
            expiry_threshold=f.duration("expiryThreshold", DEFAULT_EXPIRY_THRESHOLD),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "heartbeatInterval": format_duration(self.heartbeat_interval),
            "expiryThreshold": format_duration(self.expiry_threshold),
        }


def pool_lease(pool_body: Mapping[str, Any]) -> LeaseSettings:
    """The `spec.lease` of a Pool's body, read as `Pool.from_dict` reads it (the CRD's defaults
    where it is unset); `MalformedObjectError` when it, or `spec`, is malformed."""
    spec = Fields(pool_body.get("spec"), "spec")
    return LeaseSettings.parse(spec.obj_or_empty("lease"))
