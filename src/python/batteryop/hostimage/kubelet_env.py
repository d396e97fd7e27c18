"""`/run/battery/kubelet.env`: the kubelet's Node labels and system reserve on this Host.

- HI-074: `battery.liquidmetal-x.dev/host=true`.
- HI-060: `battery.liquidmetal-x.dev/host-image=<the first 32 hex digits of the booted image's
  digest>` (`unknown` when bootc cannot tell), and one label per hypervisor with the version the
  image pins (`versions.env`).
- HI-061: `--system-reserved` holds back everything beyond the Host reserve, so pods on a Host
  get only `HOST_RESERVE_VCPU` and `HOST_RESERVE_MEMORY_MB`; the rest is the MicroVMs'.

The kubelet's drop-in (`kubelet.service.d/20-battery.conf`) passes `$KUBELET_BATTERY_ARGS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from batteryop.api import names

UNKNOWN_IMAGE: str = "unknown"
"""The host-image label's value when the booted image's digest is not known."""
DIGEST_CHARS = 32
"""How many hex digits of the digest the label keeps (a label value holds at most 63)."""

_DIGEST = re.compile(r"sha256:(?P<hex>[0-9a-f]{64})")


@dataclass(frozen=True)
class Capacity:
    """What the machine has: logical CPUs and memory in MiB."""

    cpus: int
    memory_mb: int


def image_digest_label(bootc_status: str) -> str:
    """The host-image label value from `bootc status --format=json` output (HI-060)."""
    try:
        status = json.loads(bootc_status)
        digest = status["status"]["booted"]["image"]["imageDigest"]
    except (ValueError, KeyError, TypeError):
        return UNKNOWN_IMAGE
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    return match["hex"][:DIGEST_CHARS] if match else UNKNOWN_IMAGE


def memory_mb(meminfo: str) -> int:
    """MemTotal from `/proc/meminfo`, in MiB."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise ValueError("/proc/meminfo has no MemTotal line")


def labels(versions: Mapping[str, str], bootc_status: str) -> dict[str, str]:
    """The Node labels the kubelet registers (HI-060, HI-074)."""
    return {
        names.HOST_LABEL: names.HOST_LABEL_VALUE,
        names.HOST_IMAGE_LABEL: image_digest_label(bootc_status),
        names.FIRECRACKER_LABEL: versions["FIRECRACKER_VERSION"],
        names.CLOUD_HYPERVISOR_LABEL: versions["CLOUD_HYPERVISOR_VERSION"],
    }


def system_reserved(host: Mapping[str, str], capacity: Capacity) -> dict[str, str]:
    """HI-061: everything beyond the Host reserve, never below zero."""
    cpu = max(capacity.cpus - int(host["HOST_RESERVE_VCPU"]), 0)
    memory = max(capacity.memory_mb - int(host["HOST_RESERVE_MEMORY_MB"]), 0)
    return {"cpu": str(cpu), "memory": f"{memory}Mi"}


def render(
    host: Mapping[str, str], versions: Mapping[str, str], bootc_status: str, capacity: Capacity
) -> str:
    """The text of kubelet.env."""
    node_labels = ",".join(f"{k}={v}" for k, v in labels(versions, bootc_status).items())
    reserved = ",".join(f"{k}={v}" for k, v in system_reserved(host, capacity).items())
    return (
        "# Written at boot by battery-kubelet-config; do not edit.\n"
        f"KUBELET_BATTERY_ARGS=--node-labels={node_labels} --system-reserved={reserved}\n"
    )
