"""The Restore runbook shows the backup and restore commands the drill runs (DP-116, DP-117)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from batteryop.api import names
from batteryop.manifests import database, render

RUNBOOK = Path("docs/runbooks/restore.md")
NS = names.OPERATOR_NAMESPACE


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", RUNBOOK.read_text(), re.S | re.M)


def test_the_runbook_shows_the_commands_defined_here() -> None:
    lines = [line for block in _blocks("bash") for line in block.splitlines()]
    assert shlex.join(["kubectl", *database.backup_args(NS)]) + " > poolmgr.db" in lines
    assert f"IMAGE=$({shlex.join(['kubectl', *database.image_args(NS)])})" in lines
    restore = database.restore_args(NS, "IMAGE")
    shown = ['--image="$IMAGE"' if a == "--image=IMAGE" else a for a in restore]
    shown = [
        '--overrides="$(cat restore-pod.json)"' if a.startswith("--overrides=") else a
        for a in shown
    ]
    assert " ".join(["kubectl", *shown]) + " < poolmgr.db" in lines
    (pod,) = _blocks("json")
    assert json.loads(pod) == database.restore_overrides()


def test_the_restore_pod_mounts_batterys_volume_as_the_operator_pod_does() -> None:
    spec = render.pod_spec(operator_image="o", host_registry_image="h", battery_image="b")
    volume = next(v for v in spec["volumes"] if v["name"] == render.VOLUME_DATA)
    restore = database.restore_overrides()["spec"]
    assert volume in restore["volumes"]
    (container,) = restore["containers"]
    assert container["name"] == database.RESTORE_POD
    assert {"name": render.VOLUME_DATA, "mountPath": render.DATA_DIR} in container["volumeMounts"]
    operator = next(c for c in spec["containers"] if c["name"] == render.OPERATOR_CONTAINER)
    assert {"name": render.VOLUME_DATA, "mountPath": render.DATA_DIR} in operator["volumeMounts"]
    assert restore["securityContext"] == {
        k: spec["securityContext"][k] for k in restore["securityContext"]
    }
