"""configmap: the battery config ConfigMap as the registry writes and reads it.

Battery's config text (`config_text`, under the key `configfile_key`), the Host set
annotation's value (`publication`) and what it names (`published_entries`), the client
certificate's digest (`certificate_digest`), and the merge-patch of annotations every step
that records something on the ConfigMap uses (`patch_annotations`); each write's answer
becomes the state's ConfigMap, so the next step reads what it wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from batteryop.api import names
from batteryop.battery import configfile
from batteryop.host_registry.config import RegistryConfig
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.kube.resources import CONFIGMAPS


def certificate_digest(path: Any) -> str | None:
    """Hex SHA-256 of the client certificate file, None while it does not exist."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def published_entries(configmap: Mapping[str, Any] | None) -> dict[str, str]:
    """The Hosts (name -> address) of the published annotation; names without one are left
    out (an address is needed to write them back)."""
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    try:
        items = json.loads(annotations.get(names.HOSTS_ANNOTATION) or "[]")
    except json.JSONDecodeError:
        return {}
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("address"), str)
            and item["address"]
        ):
            out[item["name"]] = item["address"]
    return out


def publication(hosts: Mapping[str, str]) -> str:
    """The Host set annotation's value: sorted, so the same set gives the same bytes."""
    return json.dumps([{"name": n, "address": hosts[n]} for n in sorted(hosts)])


def configfile_key(config: RegistryConfig) -> str:
    """The ConfigMap key of battery's config: the file's name in the mount."""
    return config.battery_config_file.name


def config_text(config: RegistryConfig, hosts: Mapping[str, str]) -> str:
    """battery's config naming `hosts`, as the registry writes it (IN-010, DP-004)."""
    return configfile.render_text(
        hosts,
        api_address=config.battery_address,
        metrics_address=config.battery_metrics_address,
        tls_dir=str(config.battery_tls_dir),
    )


def annotations_of(scope: RegistryScope) -> Mapping[str, str]:
    """The ConfigMap's annotations as last read or written."""
    return ((scope.state.configmap or {}).get("metadata") or {}).get("annotations") or {}


async def patch_configmap(scope: RegistryScope, patch: Mapping[str, Any]) -> None:
    """Merge-patch the battery config ConfigMap; its answer is the state's ConfigMap."""
    config = scope.deps.config
    scope.state.configmap = await scope.deps.kube.patch(
        CONFIGMAPS, config.battery_config_map, dict(patch), config.namespace
    )


async def patch_annotations(scope: RegistryScope, annotations: Mapping[str, str | None]) -> None:
    await patch_configmap(scope, {"metadata": {"annotations": dict(annotations)}})
