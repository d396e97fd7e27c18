"""`RegistryDeps`: what a registry reconcile uses besides its state, shared by every reconcile.

Its own module so that the scope the steps share (`scope`) and the chain (`reconcile`) both
import it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from batteryop.api.clock import Clock
from batteryop.battery.protocol import BatteryAPI
from batteryop.host_registry.config import RegistryConfig
from batteryop.host_registry.filewatch import DirectoryWatch
from batteryop.host_registry.metrics import RegistryMetrics
from batteryop.host_registry.restarter import Restarter
from batteryop.kube.client import KubeClient
from batteryop.kube.events import EventRecorder


@dataclass(kw_only=True)
class RegistryDeps:
    """What a registry reconcile uses besides its state.

    - `config`: the registry's flags.
    - `kube`: the API server, for the battery config ConfigMap's writes.
    - `battery`: battery's API (`BatteryClient` in production).
    - `events`: Events on Nodes, posted without waiting.
    - `metrics`: the registry's metrics.
    - `restarter`: restarts battery (IN-102, DP-006).
    - `watch`: this container's mounts of battery's config and TLS files (inotify), which
      a restart waits on to show the new config.
    - `clock`: monotonic seconds; a step reads it afresh where it needs the time after a wait.
    """

    config: RegistryConfig
    kube: KubeClient
    battery: BatteryAPI
    events: EventRecorder
    metrics: RegistryMetrics
    restarter: Restarter
    watch: DirectoryWatch
    clock: Clock
