"""`ReviewDeps`: what every review of a request uses besides the request, shared by all.

Its own module so that the scope (`scope`) and the chain (`steps`) both import it and neither
imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batteryop.api.clock import Clock
from batteryop.csr_approver.config import ApproverConfig
from batteryop.csr_approver.metrics import ApproverMetrics
from batteryop.csr_approver.signing import CA
from batteryop.kube.client import KubeClient, Object


@dataclass(frozen=True)
class ReviewDeps:
    """- `config`, `kube`, `metrics` (None: no metrics): the approver's own.
    - `clock`: now, timezone-aware.
    - `ca`: the CA loaded from a Secret, by the Secret's name; None while it is not loaded.
    - `remember`: keeps a write's answer as the newest copy of its request (`inputs`)."""

    config: ApproverConfig
    kube: KubeClient
    metrics: ApproverMetrics | None
    clock: Clock
    ca: Callable[[str], CA | None]
    remember: Callable[[Object], None]
