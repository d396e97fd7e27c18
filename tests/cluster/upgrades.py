"""What the upgrade drills share (Flux's, `flux_test.py`; Helm's, `helm_test.py`): a newer
operator image, Holders renewing their claims, and one upgrade or rollback measured with a burst
in flight and a prober making claims."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    IMAGE_DIR,
    Background,
    Prober,
    apply,
    assert_one_microvm_and_lease_each,
    bound_at,
    claim_statuses,
    pods,
    publish_host_and_place_pool,
    ready_pool,
    renewed,
)

from batteryop.api import names, samples
from batteryop.release import images, oci
from batteryop.release import main as release
from batteryop.release.version import Version
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.node import KubeNode

OPERATOR_PEX = Path("src.python.batteryop.release/battery-operator-linux_x86_64.pex")
"""The operator's pex the release's image builder takes (a runtime package dependency)."""
HELD = 5
BURST = 20
LEASE_EXPIRY = "5m"


def operator_digest(node: KubeNode) -> set[str]:
    """The image digests the operator's Pods run (one Pod, unless a rollout is half done)."""
    return {
        s["imageID"].rsplit("@", 1)[-1]
        for p in pods(node)
        if p["metadata"]["name"].startswith(names.OPERATOR_DEPLOYMENT)
        for s in p["status"].get("containerStatuses", [])
        if s["name"] == "operator"
    }


def first_version(tag: str) -> Version:
    """The first release's version, as its operator image's labels record it."""
    layout = IMAGE_DIR / release.OPERATOR
    manifest = oci.platform_manifests(layout, tag)["amd64"]
    labels = json.loads(oci.blob(layout, manifest["config"]["digest"]))["config"]["Labels"]
    created = datetime.strptime(labels["org.opencontainers.image.created"], "%Y-%m-%dT%H:%M:%SZ")
    return Version(
        python=tag.lstrip("v"),
        image_tag=labels["org.opencontainers.image.version"],
        revision=labels["org.opencontainers.image.revision"],
        created=int(created.replace(tzinfo=UTC).timestamp()),
    )


def newer_operator(node: KubeNode, tag: str, out: Path) -> tuple[Version, str]:
    """The operator's image built again by the release's image builder, stamped with a newer
    version than release `tag`'s (so a new digest), pushed to the node's mirror; that version
    and the digest."""
    old = first_version(tag)
    new = replace(old, image_tag=f"{old.image_tag}-next", created=old.created + 60)
    out.mkdir(parents=True)
    layout = out / release.OPERATOR
    digest = images.build(release.OPERATOR, {"amd64": OPERATOR_PEX}, new, layout, work=out)
    install.mirror(node, {release.OPERATOR: layout})
    return new, digest


def hold_claims(node: KubeNode) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The Pools of an upgrade drill (`held` for the held claims and the bursts, `probe` for
    the prober) and HELD claims Bound on `held`; their names and Leases."""
    publish_host_and_place_pool(node, "demo")
    # A Lease outlives its Holder's silence by the Pool's expiry threshold; the operator's Pod
    # (operator and battery) is replaced by an upgrade, so the threshold must outlast that.
    ready_pool(node, "held", HELD + 2 * BURST, lease={"expiryThreshold": LEASE_EXPIRY})
    ready_pool(node, "probe", 3)
    held = [f"held-{i}" for i in range(HELD)]
    apply(node, *(samples.sample_claim(c, "held", HOLDER, DEMO_NAMESPACE) for c in held))
    asyncio.run(bound_at(node, set(held)))
    leases = held_claims(node)
    assert len(leases) == HELD
    return held, leases


@dataclass
class Renewer(Background):
    """The Holders of `claims`, renewing each every `every` seconds (the client's heartbeat)."""

    node: KubeNode
    claims: list[str]
    every: float = 10.0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(self.every):
                renew(self.node, self.claims)
        except BaseException as err:  # reported by the test
            self.error = err


def renew(node: KubeNode, claims: list[str]) -> dict[str, str]:
    """Set spec.renewTime on each claim (the Holder renews); returns the times set."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for claim in claims:
        patch = json.dumps({"spec": {"renewTime": now}})
        node.kubectl(
            ["patch", "microvmclaim", claim, "-n", DEMO_NAMESPACE, "--type=merge", "-p", patch]
        )
    return {c: now for c in claims}


def held_claims(node: KubeNode) -> dict[str, tuple[str, str]]:
    return {
        c: (s["leaseID"], s["microVM"]["uid"])
        for c, s in claim_statuses(node, "held-").items()
        if s.get("phase") == "Bound"
    }


def upgrade_step(
    node: KubeNode,
    held: list[str],
    leases: dict[str, tuple[str, str]],
    what: str,
    move: Callable[[], tuple[str, float]],
    prefix: str,
) -> None:
    """One upgrade or rollback (`move`: returns what it moved to and the seconds it took, once
    every workload is rolled out) with a burst in flight and a prober making claims; the held
    claims kept their Leases and MicroVMs and renew through the new operator."""
    burst = [f"{prefix}{i:02}" for i in range(BURST)]
    with Prober(node, "probe") as prober:
        apply(node, *(samples.sample_claim(c, "held", HOLDER, DEMO_NAMESPACE) for c in burst))
        revision, took = move()
        asyncio.run(bound_at(node, set(burst)))
        after = time.monotonic()
        # One more claim through the new operator, so the window closes inside the probe.
        prober.bound_after(after)
    assert prober.error is None, prober.error
    assert_one_microvm_and_lease_each(node, prefix, BURST)
    assert held_claims(node) == leases  # every Bound claim kept its Lease and MicroVM
    asyncio.run(renewed(node, renew(node, held)))  # and renews through the new operator
    binds = sorted(b for _, b in prober.made)
    gaps = [b - a for a, b in itertools.pairwise(binds)]
    slowest = max(b - a for a, b in prober.made)
    print(
        f"\n{what} to {revision}: applied and rolled out "
        f"in {took:.1f} s; {len(prober.made)} probe claims, slowest create-to-Bound "
        f"{slowest:.1f} s; longest time with no claim bound {max(gaps):.1f} s"
    )
