"""`RegistryState`: what the host registry knows between reconciles.

The operator's controllers keep their state in the objects they reconcile; the registry's one
reconcile is of the whole inventory, and what it learned (what battery has, what it wrote,
which changes are pending, what it reported) lives here, one per registry process. The inputs
(`host_registry.inputs`) fill `nodes` and `configmap`; the steps read and change the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batteryop.host_registry.plan import Settler, Window
from batteryop.kube.client import Object


@dataclass(kw_only=True)
class RegistryState:
    settler: Settler
    """IN-011: each Node's wanted membership against what battery has."""
    window: Window
    """IN-012: the restart window."""
    nodes: dict[str, Object] = field(default_factory=dict)
    """Every Node, by name, as last listed or watched."""
    configmap: Object | None = None
    """The battery config ConfigMap as last watched or written (None: missing)."""
    nodes_listed: bool = False
    configmap_listed: bool = False
    applied: dict[str, str] = field(default_factory=dict)
    """Hosts battery has: name -> address."""
    cordoned: set[str] = field(default_factory=set)
    """Hosts cordoned in battery."""
    written: dict[str, str] = field(default_factory=dict)
    """Hosts in the config text the registry last wrote (or found). With the host RPCs, the
    Hosts the registry put into battery: it follows every AddHost, UpdateHost and RemoveHost
    that succeeded (IN-107), and battery's Host list is checked against it (IN-105)."""
    next_check_at: float | None = None
    """IN-105: when battery's Host list is read again (monotonic); set at resume."""
    check_trigger: str = "start"
    """What made the next check due: start, reconnect, periodic or retry (a metric label)."""
    host_api: bool | None = None
    """Whether battery answers the host RPCs (IN-101, IN-102); None until resumed."""
    recorded_digest: str | None = None
    """The client certificate's SHA-256 battery last read (DP-007)."""
    reported_invalid: dict[str, str] = field(default_factory=dict)
    """Nodes -> the refusal of their report last posted as an Event (IN-103, once each)."""
    resumed: bool = False
    drain_deadlines: dict[str, float] = field(default_factory=dict)
    """IN-013: leaving Hosts -> when their drain times out (set when the drain starts)."""
    refusals: dict[str, str] = field(default_factory=dict)
    """Leaving Hosts -> battery's last reason for refusing RemoveHost, reported once."""
    published_at: dict[str, float] = field(default_factory=dict)
    """When each Host was first published (monotonic), for the benchmark and logs."""
