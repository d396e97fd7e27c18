"""battery-operator installed and upgraded through Flux, on the real node (issue 27).

Flux's own source-controller and kustomize-controller (the versions Flux CLI v2.9.5 installs,
from their modules, with the install kustomization the Flux CLI's module carries) run as Pods;
cert-manager's controllers (its pinned module) issue the Certificates install.yaml asks for.
An `OCIRepository` points at the release's Manifests artifact pushed to the node's registry and
a `Kustomization` applies it with a mirror's image overrides. Then:

- every Flux object reports Ready at the artifact's revision and every workload runs;
- an upgrade: a newer release (the operator's image built again by the release's image builder,
  stamped with a newer version, so a new digest, and a new artifact) while claims are Bound and
  a burst is in flight. The `OCIRepository` moves to it; Flux rolls the operator's Pod; every
  Bound claim keeps its Lease and renews, the burst binds one MicroVM per claim, and Flux
  reports the new revision applied with every workload rolled out;
- a rollback the same way, to the first artifact.

The figures (Kustomization applied to all Ready, the window in which no claim bound during the
upgrade, cert-manager's issuance time) are printed for the closing note and the docs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    IMAGE_DIR,
    IMAGES,
    INSTALL_YAML,
    MANIFESTS,
    apply,
    assert_one_microvm_and_lease_each,
    bound_at,
    claim_statuses,
    make_demo,
    pods,
    publish_host_and_place_pool,
    ready_pool,
    renewed,
)

from batteryop.api import names, samples
from batteryop.release import flux, images, oci
from batteryop.release import main as release
from batteryop.release.version import Version
from batteryop.testing.kubenode import addons, install
from batteryop.testing.kubenode.node import KubeNode

OPERATOR_PEX = Path("src.python.batteryop.release/battery-operator-linux_x86_64.pex")
HELD = 5
BURST = 20
LEASE_EXPIRY = "5m"


def artifact_tag(layout: Path) -> str:
    manifests = oci.read_index(layout)["manifests"]
    assert isinstance(manifests, list)
    return str(manifests[0]["annotations"][flux.REF_ANNOTATION])


@pytest.fixture(scope="module")
def first() -> install.FluxSource:
    return install.FluxSource(MANIFESTS, artifact_tag(MANIFESTS))


@pytest.fixture(scope="module")
def installed(node: KubeNode, first: install.FluxSource) -> install.Installed:
    layouts = {name: IMAGE_DIR / name for name in IMAGES}
    done = install.install(node, INSTALL_YAML, layouts, flux=first)
    t = done.times
    print(
        f"\nthrough Flux: images mirrored in {t['mirror']:.1f} s; cert-manager running in "
        f"{t['cert_manager']:.1f} s; Flux's controllers running in {t['flux']:.1f} s; "
        f"Kustomization applied to every Certificate issued {t['apply_to_certificates']:.1f} s, "
        f"to every workload ready and the Kustomization Ready {t['apply_to_ready']:.1f} s"
    )
    print(done.applied)
    return done


@pytest.fixture(scope="module")
def demo(node: KubeNode, installed: install.Installed) -> str:
    return make_demo(node)


def operator_digest(node: KubeNode) -> set[str]:
    """The image digests the operator's Pods run (one Pod, unless a rollout is half done)."""
    return {
        s["imageID"].rsplit("@", 1)[-1]
        for p in pods(node)
        if p["metadata"]["name"].startswith(names.OPERATOR_DEPLOYMENT)
        for s in p["status"].get("containerStatuses", [])
        if s["name"] == "operator"
    }


@pytest.mark.req("DP-030", "DP-031", "DP-033", "TD-116", "TD-117")
def test_flux_installs_the_artifact_and_every_workload_runs(
    node: KubeNode, installed: install.Installed, first: install.FluxSource
) -> None:
    revision = f"{first.tag}@{oci.index_digest(first.layout, first.tag)}"
    source = addons.wait_flux_ready(node, "ocirepository", install.FLUX_NAME, revision)
    assert source["artifact"]["revision"] == revision
    applied = addons.wait_flux_ready(node, "kustomization", install.FLUX_NAME, revision)
    assert applied["lastAppliedRevision"] == revision
    inventory = {e["id"] for e in applied["inventory"]["entries"]}
    assert any(names.OPERATOR_DEPLOYMENT in e for e in inventory), inventory
    for pod in pods(node):
        statuses = pod["status"].get("containerStatuses", [])
        assert statuses and all(s["ready"] for s in statuses), (pod["metadata"]["name"], statuses)
    want = oci.index_digest(IMAGE_DIR / release.OPERATOR, first.tag)
    assert operator_digest(node) == {want}


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


def newer_release(
    node: KubeNode, first: install.FluxSource, out: Path
) -> tuple[install.FluxSource, str]:
    """The next release: the operator's image built by the release's image builder with a newer
    version (so a new digest), install.yaml pinned to it and the other images as they were, and
    its Manifests artifact; the operator's image pushed to the node's mirror. Returns the
    artifact and the operator's new digest."""
    old = first_version(first.tag)
    new = replace(old, image_tag=f"{old.image_tag}-next", created=old.created + 60)
    out.mkdir(parents=True)
    layout = out / release.OPERATOR
    digest = images.build(release.OPERATOR, {"amd64": OPERATOR_PEX}, new, layout, work=out)
    install.mirror(node, {release.OPERATOR: layout})
    digests = {
        name: oci.index_digest(IMAGE_DIR / name, first.tag)
        for name in IMAGES
        if name not in (install.FAKE_BATTERY, release.OPERATOR)
    }
    digests[release.OPERATOR] = digest
    text, _ = release.render_install_yaml(digests, new.image_tag)  # battery's: not ours
    flux.write_layout(
        out / "manifests",
        text.encode(),
        tag=new.image_tag,
        source=images.SOURCE_URL,
        revision=f"{new.image_tag}@sha1:{new.revision}",
        created=images.created_rfc3339(new.created),
        mtime=new.created,
    )
    return install.FluxSource(out / "manifests", new.image_tag), digest


@dataclass
class Prober:
    """Claims made one at a time on `pool` while something happens: when each was made and
    when it was Bound, to find the window in which no claim could bind."""

    node: KubeNode
    pool: str
    made: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                name = f"probe-{i:03}"
                i += 1
                started = time.monotonic()
                apply(self.node, samples.sample_claim(name, self.pool, HOLDER, DEMO_NAMESPACE))
                bound = asyncio.run(bound_at(self.node, {name}, timeout=300))
                with self.changed:
                    self.made.append((started, bound[name]))
                    self.changed.notify_all()
                self.node.kubectl(
                    ["delete", "microvmclaim", name, "-n", DEMO_NAMESPACE, "--wait=false"]
                )
        except BaseException as err:  # reported by the test
            with self.changed:
                self.error = err
                self.changed.notify_all()

    def bound_after(self, moment: float, timeout: float = 300.0) -> None:
        """Until a probe claim is Bound after `moment` (or the prober failed)."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.error is not None or any(b > moment for _, b in self.made),
                timeout=timeout,
            )

    def __enter__(self) -> Prober:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=320)


@dataclass
class Renewer:
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

    def __enter__(self) -> Renewer:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def renew(node: KubeNode, claims: list[str]) -> dict[str, str]:
    """Set spec.renewTime on each claim (the Holder renews); returns the times set."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for claim in claims:
        patch = json.dumps({"spec": {"renewTime": now}})
        node.kubectl(
            ["patch", "microvmclaim", claim, "-n", DEMO_NAMESPACE, "--type=merge", "-p", patch]
        )
    return {c: now for c in claims}


def move_to(
    node: KubeNode, installed: install.Installed, source: install.FluxSource, want_digest: str
) -> tuple[str, float]:
    """Point the OCIRepository at `source`; returns its revision once Flux has applied it,
    every workload is rolled out and the operator runs `want_digest`, and the seconds it took."""
    started = time.monotonic()
    revision = install.apply_flux_source(node, source, installed.images)
    addons.wait_flux_ready(node, "kustomization", install.FLUX_NAME, revision)
    install.wait_workloads(node)
    assert operator_digest(node) == {want_digest}
    return revision, time.monotonic() - started


def held_claims(node: KubeNode) -> dict[str, tuple[str, str]]:
    return {
        c: (s["leaseID"], s["microVM"]["uid"])
        for c, s in claim_statuses(node, "held-").items()
        if s.get("phase") == "Bound"
    }


@pytest.mark.req("CL-030", "CL-061", "DP-002", "DP-030", "TD-117")
def test_an_upgrade_and_a_rollback_through_flux_lose_no_claim(
    node: KubeNode,
    installed: install.Installed,
    first: install.FluxSource,
    demo: str,
    tmp_path: Path,
) -> None:
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
    newer, new_digest = newer_release(node, first, tmp_path / "next")
    old_digest = oci.index_digest(IMAGE_DIR / release.OPERATOR, first.tag)
    assert new_digest != old_digest

    renewer = Renewer(node, held)
    with renewer:
        for step, (source, digest, prefix) in enumerate(
            [(newer, new_digest, "up-"), (first, old_digest, "down-")]
        ):
            upgrade_step(node, installed, held, leases, step, source, digest, prefix)
    assert renewer.error is None, renewer.error


def upgrade_step(
    node: KubeNode,
    installed: install.Installed,
    held: list[str],
    leases: dict[str, tuple[str, str]],
    step: int,
    source: install.FluxSource,
    digest: str,
    prefix: str,
) -> None:
    """One move of the OCIRepository with a burst in flight and a prober making claims."""
    burst = [f"{prefix}{i:02}" for i in range(BURST)]
    with Prober(node, "probe") as prober:
        apply(node, *(samples.sample_claim(c, "held", HOLDER, DEMO_NAMESPACE) for c in burst))
        revision, took = move_to(node, installed, source, digest)
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
        f"\n{'upgrade' if step == 0 else 'rollback'} to {revision}: applied and rolled out "
        f"in {took:.1f} s; {len(prober.made)} probe claims, slowest create-to-Bound "
        f"{slowest:.1f} s; longest time with no claim bound {max(gaps):.1f} s"
    )


@pytest.mark.req("TD-113")
def test_nothing_left_the_machine(node: KubeNode, installed: install.Installed) -> None:
    assert node.machine.dropped() == 0
