"""The sample Pool, the demo Pool and a claim, as the bodies a user would apply.

Docs, manifests and tests take them from here. By default they name the guest images of the
v0.4.1 release by tag; a release built by `./pants package ::` names its own guest images,
pinned by digest, in its sample Pool (`dist/release/samples.yaml` and the chart's, written by
`batteryop.release.main`), and the local stack names the images it built (`demo_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from batteryop.api import names

GUEST_KERNEL_IMAGE: Final = "ghcr.io/phoban01/battery-operator/guest-kernel:v0.4.1"
"""The v0.4.1 release's kernel image (Firecracker's CI kernel at boot/vmlinux, built before
`guest_image` targets existed here; ours is Debian's 6.1 source with Firecracker's
configuration, `batteryop.release.guest_kernel`)."""
GUEST_KERNEL_FILENAME: Final = "boot/vmlinux"
GUEST_ROOTFS_IMAGE: Final = "ghcr.io/phoban01/battery-operator/guest-rootfs:v0.4.1"
"""The v0.4.1 release's root filesystem image (its notes say Ubuntu 24.04 with systemd and
flintlock's guest agent; ours is Debian 12, `batteryop.release.guest_rootfs`)."""


@dataclass(frozen=True)
class GuestImages:
    """The two images a Pool's template names: the kernel image (its `boot/vmlinux`) and the
    root volume's image. A release pins its own by digest; the local stack's are in its own
    registry."""

    kernel: str
    rootfs: str


V0_4_1: Final = GuestImages(GUEST_KERNEL_IMAGE, GUEST_ROOTFS_IMAGE)
"""The v0.4.1 release's guest images, by tag: the default of every sample here."""


def _meta(name: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return meta


def sample_pool(
    name: str = "pool-sample",
    namespace: str | None = None,
    *,
    guests: GuestImages = V0_4_1,
) -> dict[str, Any]:
    """The sample Pool: four 2-vCPU, 4 GiB MicroVMs on amd64 Hosts, every field spelled out;
    the v0.4.1 guest images unless others are given (a release's own, pinned by digest)."""
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
                    "image": guests.kernel,
                    "filename": GUEST_KERNEL_FILENAME,
                    "cmdline": {"console": "ttyS0", "reboot": "k"},
                },
                "rootVolume": {"containerSource": guests.rootfs},
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
    guests: GuestImages = V0_4_1,
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
                "kernel": {"image": guests.kernel, "filename": GUEST_KERNEL_FILENAME},
                "rootVolume": {"containerSource": guests.rootfs},
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
