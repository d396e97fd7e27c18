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

import time
from functools import partial
from pathlib import Path

import pytest
from cluster.drills import (
    IMAGE_DIR,
    IMAGES,
    MANIFESTS,
    install_release,
    make_demo,
    pods,
)
from cluster.upgrades import (
    Renewer,
    hold_claims,
    newer_operator,
    operator_digest,
    upgrade_step,
)

from batteryop.api import names
from batteryop.release import flux, images, oci
from batteryop.release import main as release
from batteryop.testing.kubenode import addons, install
from batteryop.testing.kubenode.node import KubeNode


def artifact_tag(layout: Path) -> str:
    manifests = oci.read_index(layout)["manifests"]
    assert isinstance(manifests, list)
    return str(manifests[0]["annotations"][flux.REF_ANNOTATION])


@pytest.fixture(scope="module")
def first() -> install.FluxSource:
    return install.FluxSource(MANIFESTS, artifact_tag(MANIFESTS))


@pytest.fixture(scope="module")
def installed(node: KubeNode, first: install.FluxSource) -> install.Installed:
    return install_release(node, flux=first)


@pytest.fixture(scope="module")
def demo(node: KubeNode, installed: install.Installed) -> str:
    return make_demo(node)


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


def newer_release(
    node: KubeNode, first: install.FluxSource, out: Path
) -> tuple[install.FluxSource, str]:
    """The next release: the operator's image built by the release's image builder with a newer
    version (so a new digest), install.yaml pinned to it and the other images as they were, and
    its Manifests artifact; the operator's image pushed to the node's mirror. Returns the
    artifact and the operator's new digest."""
    new, digest = newer_operator(node, first.tag, out)
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


@pytest.mark.req("CL-030", "CL-061", "DP-002", "DP-030", "TD-117")
def test_an_upgrade_and_a_rollback_through_flux_lose_no_claim(
    node: KubeNode,
    installed: install.Installed,
    first: install.FluxSource,
    demo: str,
    tmp_path: Path,
) -> None:
    held, leases = hold_claims(node)
    newer, new_digest = newer_release(node, first, tmp_path / "next")
    old_digest = oci.index_digest(IMAGE_DIR / release.OPERATOR, first.tag)
    assert new_digest != old_digest

    renewer = Renewer(node, held)
    with renewer:
        for what, (source, digest, prefix) in zip(
            ("upgrade", "rollback"),
            [(newer, new_digest, "up-"), (first, old_digest, "down-")],
            strict=True,
        ):
            upgrade_step(
                node,
                held,
                leases,
                what,
                partial(move_to, node, installed, source, digest),
                prefix,
            )
    assert renewer.error is None, renewer.error


@pytest.mark.req("TD-113")
def test_nothing_left_the_machine(node: KubeNode, installed: install.Installed) -> None:
    assert node.machine.dropped() == 0
