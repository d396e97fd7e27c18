"""battery's database backed up and restored as the Restore runbook says (DP-116..DP-119).

The operator's image carries `battery-operator db` (`batteryop.battery.database`). Both commands
go through kubectl, defined once here: the runbook (docs/runbooks/restore.md) shows them, a test
checks it shows these, and the real-node drill (tests/cluster/install_test.py) runs them.

- **Backup**, online: `kubectl exec` into the operator's container, which mounts battery's
  volume, streams a consistent copy to kubectl's standard output.
- **Restore**, battery stopped (the operator's Deployment at 0): `kubectl run` a Pod of the
  operator's image with battery's volume mounted, the copy on its standard input. Its spec is
  a strategic-merge override of what `kubectl run` makes (`--override-type=strategic`), so the
  image comes from the running release and the override holds no version.
"""

from __future__ import annotations

import json
from typing import Any, Final

from batteryop.api import names
from batteryop.manifests import rbac, render
from batteryop.release.images import entrypoint

RESTORE_POD: Final = names.BATTERY_DB_RESTORE_POD
"""The restore Pod's name, which `kubectl run` also gives its one container."""
OPERATOR_IMAGE_NAME: Final = "battery-operator"
"""The operator's image (its PEX's name): the one that carries `battery-operator db`."""


def image_args(namespace: str) -> list[str]:
    """kubectl's arguments that print the operator's image, as the running release has it."""
    path = f'{{.spec.template.spec.containers[?(@.name=="{render.OPERATOR_CONTAINER}")].image}}'
    return ["-n", namespace, "get", f"deploy/{names.OPERATOR_DEPLOYMENT}", "-o", f"jsonpath={path}"]


def backup_args(namespace: str) -> list[str]:
    """kubectl's arguments for a copy of the live database on standard output (DP-116)."""
    return [
        "-n",
        namespace,
        "exec",
        f"deploy/{names.OPERATOR_DEPLOYMENT}",
        "-c",
        render.OPERATOR_CONTAINER,
        "--",
        *entrypoint(OPERATOR_IMAGE_NAME),
        "db",
        "backup",
    ]


def restore_overrides() -> dict[str, Any]:
    """The restore Pod beyond what `kubectl run` makes: battery's volume, restricted security."""
    return {
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": render.RUN_AS,
                "runAsGroup": render.RUN_AS,
                "fsGroup": render.RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": RESTORE_POD,
                    "securityContext": render.container_security(),
                    "resources": render.container_resources("50m", "64Mi", "1", "256Mi"),
                    "volumeMounts": [
                        {"name": render.VOLUME_DATA, "mountPath": render.DATA_DIR},
                        rbac.tmp_mount(render.VOLUME_TMP_OPERATOR),
                    ],
                }
            ],
            "volumes": [
                {
                    "name": render.VOLUME_DATA,
                    "persistentVolumeClaim": {"claimName": names.BATTERY_DATA_PVC},
                },
                rbac.tmp_volume(render.VOLUME_TMP_OPERATOR),
            ],
        }
    }


def restore_args(namespace: str, image: str) -> list[str]:
    """kubectl's arguments for a restore from standard input (DP-117, DP-119)."""
    return [
        "-n",
        namespace,
        "run",
        RESTORE_POD,
        "-i",
        "--rm",
        "--restart=Never",
        f"--image={image}",
        "--override-type=strategic",
        f"--overrides={json.dumps(restore_overrides(), separators=(',', ':'))}",
        "--",
        "db",
        "restore",
        "-",
    ]
