"""Render a Host pool: the base templates (`src/capi/host-pool`) with the Component's
replacements (`src/capi/host-pool-params`) applied from checked settings.

The renderer reads the very files kustomize reads and applies the Component's own
`replacements`, so `kubectl kustomize src/capi/pools/<pool>` and this renderer give the same
objects for valid settings (a test holds them to it). What kustomize cannot do, the renderer
adds: it checks every setting first, and writes every additional security group where
kustomize takes the first.

Only the part of kustomize's replacement language the Component uses is understood: a
`data.<key>` source with an optional delimiter/index, targets selected by group and kind, and
field paths of names, `[map key]`, `[field=value]` list selectors and list indexes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from batteryop.capi.settings import SETTINGS_CONFIGMAP, HostPoolSettings, from_configmap

BASE = "host-pool"
COMPONENT = "host-pool-params"
SETTINGS_FILE = "host-pool.yaml"

_SEGMENT = re.compile(r"\[[^\]]*\]|[^.\[\]]+")


class TemplateError(RuntimeError):
    """The templates themselves are broken (a path that does not exist, a kind not there)."""


@dataclass(frozen=True)
class Templates:
    """The base objects and the Component's replacements, as read from a `src/capi` folder."""

    objects: tuple[dict[str, Any], ...]
    replacements: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, root: Path) -> Templates:
        base = yaml.safe_load((root / BASE / "kustomization.yaml").read_text())
        objects = tuple(
            doc
            for name in base["resources"]
            for doc in yaml.safe_load_all((root / BASE / name).read_text())
            if doc
        )
        component = yaml.safe_load((root / COMPONENT / "kustomization.yaml").read_text())
        return cls(objects=objects, replacements=tuple(component["replacements"]))

    def kubernetes_version(self) -> str:
        """The version the MachineDeployment template carries: the Host Image's (HP-003)."""
        (deployment,) = (o for o in self.objects if o["kind"] == "MachineDeployment")
        return str(deployment["spec"]["template"]["spec"]["version"])


def find_root(start: Path | None = None) -> Path:
    """The `src/capi` folder, found from the working directory upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / BASE / "kustomization.yaml").is_file():
            return folder
        if (folder / "src" / "capi" / BASE).is_dir():
            return folder / "src" / "capi"
    raise TemplateError(f"no src/capi/{BASE} above {here}")


def load_settings(path: Path, templates: Templates) -> HostPoolSettings:
    body = yaml.safe_load(path.read_text())
    if not isinstance(body, Mapping):
        raise TemplateError(f"{path}: not a YAML mapping")
    return from_configmap(body, default_version=templates.kubernetes_version())


def render(settings: HostPoolSettings, templates: Templates) -> list[dict[str, Any]]:
    """The Host pool's objects: a MachineDeployment, AWSMachineTemplate,
    KubeadmConfigTemplate and MachineHealthCheck (HP-001)."""
    objects = [copy.deepcopy(o) for o in templates.objects]
    for replacement in templates.replacements:
        source = replacement["source"]
        if source.get("kind") != "ConfigMap" or source.get("name") != SETTINGS_CONFIGMAP:
            raise TemplateError(f"a replacement reads {source}, not the settings")
        value = _source_value(settings.values, source)
        for target in replacement["targets"]:
            chosen = [o for o in objects if _selected(o, target["select"])]
            if not chosen:
                raise TemplateError(f"no object matches {target['select']}")
            for obj in chosen:
                for path in target["fieldPaths"]:
                    _set(obj, path, value)
    for obj in objects:  # HP-006: every group, where kustomize alone takes the first
        if obj["kind"] == "AWSMachineTemplate":
            obj["spec"]["template"]["spec"]["additionalSecurityGroups"] = [
                {"id": group} for group in settings.security_groups
            ]
    return objects


def _source_value(values: Mapping[str, str], source: Mapping[str, Any]) -> str:
    path = _segments(source["fieldPath"])
    if len(path) != 2 or path[0] != "data":
        raise TemplateError(f"a replacement reads {source['fieldPath']}, not data.<setting>")
    value = values[path[1].strip("[]")]
    options = source.get("options") or {}
    if "delimiter" in options:
        value = value.split(options["delimiter"])[int(options.get("index", 0))]
    return value


def _selected(obj: Mapping[str, Any], select: Mapping[str, str]) -> bool:
    group = obj["apiVersion"].rpartition("/")[0]
    return obj["kind"] == select["kind"] and select.get("group", group) == group


def _segments(path: str) -> list[str]:
    return _SEGMENT.findall(path)


def _set(obj: dict[str, Any], path: str, value: str) -> None:
    *parents, last = _segments(path)
    node: Any = obj
    for segment in parents:
        node = _child(node, segment, path)
    key: Any = last.strip("[]")
    if isinstance(node, list):
        key = int(key)
        old = node[key]
    else:
        if key not in node:
            raise TemplateError(f"{obj['kind']}: {path} is not in the template")
        old = node[key]
    # kustomize keeps the target's type: a number stays a number.
    node[key] = int(value) if isinstance(old, int) and not isinstance(old, bool) else value


def _child(node: Any, segment: str, path: str) -> Any:
    if isinstance(node, list):
        if segment.startswith("[") and "=" in segment:
            field, _, wanted = segment[1:-1].partition("=")
            for item in node:
                if isinstance(item, dict) and str(item.get(field)) == wanted:
                    return item
            raise TemplateError(f"{path}: no item with {field}={wanted}")
        return node[int(segment)]
    key = segment.strip("[]")
    if not isinstance(node, dict) or key not in node:
        raise TemplateError(f"{path}: {key} is not in the template")
    return node[key]
