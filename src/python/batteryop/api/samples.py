"""The sample Pool, the demo Pool and a claim, as the bodies a user would apply.

Docs, manifests and tests take them from here. They name the guest images the release notes
name (v0.3.3 onwards: the demo, the sample Pool and the Install page use them).
"""

from __future__ import annotations

from typing import Any, Final

from batteryop.api import names

GUEST_KERNEL_IMAGE: Final = "ghcr.io/phoban01/battery-operator/guest-kernel:v0.4.1"
"""Firecracker's CI kernel at boot/vmlinux."""
GUEST_KERNEL_FILENAME: Final = "boot/vmlinux"
GUEST_ROOTFS_IMAGE: Final = "ghcr.io/phoban01/battery-operator/guest-rootfs:v0.4.1"
"""Ubuntu 24.04 with systemd and flintlock's guest agent."""


def _meta(name: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return meta


def sample_pool(name: str = "pool-sample", namespace: str | None = None) -> dict[str, Any]:
    """The sample Pool: four 2-vCPU, 4 GiB MicroVMs on amd64 Hosts, every field spelled out."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.POOL_KIND,
        "metadata": _meta(name, namespace),
        "spec": {
            "size": 4,
            "template": {
                "vcpu": 2,
                "memoryInMb": 4096,
                "kernel": {
                    "image": GUEST_KERNEL_IMAGE,
                    "filename": GUEST_KERNEL_FILENAME,
                    "cmdline": {"console": "ttyS0", "reboot": "k"},
                },
                "rootVolume": {"containerSource": GUEST_ROOTFS_IMAGE},
                "interfaces": [{"deviceId": "eth1", "type": "Tap"}],
            },
            "placement": {"nodeSelector": {"kubernetes.io/arch": "amd64"}},
            "replenishment": {"type": "ImmediateOnLease"},
            "hooks": {"create": ["true"], "failurePolicy": "DeleteAndReplace"},
            "lease": {"heartbeatInterval": "10s", "expiryThreshold": "30s"},
        },
    }


def demo_pool(
    name: str = "demo",
    namespace: str | None = None,
    *,
    kernel_image: str = GUEST_KERNEL_IMAGE,
    rootfs_image: str = GUEST_ROOTFS_IMAGE,
) -> dict[str, Any]:
    """The demo Pool: two small MicroVMs on any Host, defaults left to the CRD; the guest
    images the release names unless others are given (the local stack's own registry)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.POOL_KIND,
        "metadata": _meta(name, namespace),
        "spec": {
            "size": 2,
            "template": {
                "vcpu": 1,
                "memoryInMb": 1024,
                "kernel": {"image": kernel_image, "filename": GUEST_KERNEL_FILENAME},
                "rootVolume": {"containerSource": rootfs_image},
                "interfaces": [{"deviceId": "eth1", "type": "Tap"}],
            },
            "placement": {"nodeSelector": {names.HOST_LABEL: names.HOST_LABEL_VALUE}},
            "hooks": {"create": ["uname -r"]},
        },
    }


def sample_claim(
    name: str = "claim-sample",
    pool: str = "pool-sample",
    service_account: str = "sandbox",
    namespace: str | None = None,
) -> dict[str, Any]:
    """A claim on `pool` for the Holder `service_account`."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.CLAIM_KIND,
        "metadata": _meta(name, namespace),
        "spec": {"poolRef": {"name": pool}, "serviceAccountName": service_account},
    }
