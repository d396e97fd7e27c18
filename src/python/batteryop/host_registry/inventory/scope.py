"""`RegistryScope`: the working state of one reconcile of the inventory, shared by the steps.

A scope holds the registry's `RegistryState` (what it knows between reconciles, which the
steps change), its `RegistryDeps`, the time the reconcile reads as now, what `admit` decided
(`admissions`, `wanted`), what has settled (`settled`), the client certificate as this
reconcile sees it (`digest`, `renewed`) and, in the `Outcome`, when to look again without an
input (`outcome.requeue_after`, set by `schedule`).

Unlike the operator's steps, the registry's steps call the API server themselves: each write
of the battery config ConfigMap is ordered against battery calls within one reconcile (the
Host set is published without the leaving Hosts before a drain waits for Pools to let them go,
IN-013; `restart-pending` is written before battery is restarted and cleared after, DP-006;
the config is written before battery is restarted on it), and the next step reads the
ConfigMap each write answers. An Outcome is one object's writes applied after the reconcile,
so it holds only the requeue here. Events concern many Nodes, not the reconciled object, and
go through `EventRecorder.post`, which never waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from batteryop.host_registry.admission import Admission
from batteryop.host_registry.inventory.deps import RegistryDeps
from batteryop.host_registry.inventory.state import RegistryState
from batteryop.kube.chain import Scope


@dataclass
class RegistryScope(Scope):
    state: RegistryState
    deps: RegistryDeps
    now: float
    """The reconcile's now (monotonic); read again after a resume that restarted battery."""
    admissions: Mapping[str, Admission] = field(default_factory=dict)
    """Every Node's admission (`admit`)."""
    wanted: dict[str, str] = field(default_factory=dict)
    """Admitted Hosts: name -> address (`admit`)."""
    settled: dict[str, str | None] = field(default_factory=dict)
    """Changes settled by `now` (`cordons`): name -> address, None for a leave."""
    digest: str | None = None
    """The client certificate's SHA-256 as this reconcile sees it (`cordons`)."""
    renewed: bool = False
    """The certificate differs from the one battery last read (DP-007)."""
