"""Where the built deployables are: each component runs from its own `pex_binary`.

`./pants package` writes a target's pex to `dist/<path with dots>/<name>.pex`; a test's
`runtime_package_dependencies` and `run_shell_command`'s dependencies put it at
the same relative path in their sandbox. So one root names them all: `dist/`, or the sandbox.
The client wheel sits at the root itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PEXES: Final[Mapping[str, str]] = {
    "operator": "src.python.batteryop.operator/battery-operator.pex",
    "exec-agent": "src.python.batteryop.exec_agent/exec-agent.pex",
    "csr-approver": "src.python.batteryop.csr_approver/csr-approver.pex",
    "host-registry": "src.python.batteryop.host_registry/host-registry.pex",
    "battery": "src.python.batteryop.testing.fake_battery/fake-battery.pex",
    "flintlockd": "src.python.batteryop.testing.fake_flintlock/fake-flintlockd.pex",
}
"""Component kind -> the pex of its deployable, relative to the artifacts root."""

TARGETS: Final = (
    "src/python/batteryop/operator:battery-operator",
    "src/python/batteryop/exec_agent:exec-agent",
    "src/python/batteryop/csr_approver:csr-approver",
    "src/python/batteryop/host_registry:host-registry",
    "src/python/batteryop/testing/fake_battery:fake-battery",
    "src/python/batteryop/testing/fake_flintlock:fake-flintlockd",
    "src:battery-operator-client",
)
"""What `./pants package` must build for the stack (the same set the BUILD file names)."""

WHEEL_GLOB: Final = "battery_operator_client-*.whl"


class ArtifactsError(RuntimeError):
    """A pex or the client wheel is missing under the artifacts root."""


@dataclass(frozen=True)
class Artifacts:
    pexes: Mapping[str, Path]
    wheel: Path

    @classmethod
    def find(cls, root: Path) -> Artifacts:
        missing = [rel for rel in PEXES.values() if not (root / rel).is_file()]
        wheels = sorted(root.glob(WHEEL_GLOB))
        if not wheels:
            missing.append(WHEEL_GLOB)
        if missing:
            raise ArtifactsError(
                f"not built under {root}: {', '.join(missing)} "
                f"(./pants package {' '.join(TARGETS)})"
            )
        return cls({kind: (root / rel).resolve() for kind, rel in PEXES.items()}, wheels[-1])

    def pex(self, kind: str) -> str:
        return str(self.pexes[kind])
