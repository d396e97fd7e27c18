"""The drain guard Pod's shape: what the Exec Agent builds (`exec_agent/drain_guard.py`) and the
only thing the admission policy of EA-051 admits from it (`manifests/exec_agent.py`, EA-110).

Defined once here so the Pod and the rules cannot drift apart: the pinned image
(`names.DRAIN_GUARD_IMAGE`), the user it runs as, and its resources, which are also the
policy's upper bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from batteryop.api import names

IMAGE: Final = names.DRAIN_GUARD_IMAGE
"""The one image the policy admits for the guard (pause: it only has to stay running)."""
CONTAINER: Final = "guard"
USER: Final = 65535
"""The pause image's own non-root user."""
REQUESTS: Final[Mapping[str, str]] = MappingProxyType({"cpu": "1m", "memory": "4Mi"})
"""The guard's requests; the policy admits no more."""
LIMITS: Final[Mapping[str, str]] = MappingProxyType({"cpu": "10m", "memory": "16Mi"})
"""The guard's limits; the policy requires both and admits no more."""
