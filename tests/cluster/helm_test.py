"""battery-operator installed, upgraded and rolled back with Helm, on the real node (issue 49).

The release's chart archive (what `pants package` writes beside install.yaml) goes in with
`helm install`, as a user with a mirror installs it: the Helm built from its pinned module,
values that take every image from the node's registry (`imageRegistry`; battery's image the
fake's), cert-manager issuing. Then:

- every workload Ready; a claim made through the Python client Binds and runs a command;
- `helm upgrade` to a newer release's chart (the operator's image built again by the release's
  image builder with a newer version, so a new digest, and the chart written by the release
  for it) while claims are Bound, their Holders renew and a burst is in flight; every Bound
  claim keeps its Lease and MicroVM and renews through the new operator;
- `helm rollback` to the first revision the same way.

Printed for the closing note and the docs: `helm install` to every workload Ready, and each
move's longest time with no claim bound.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest
from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    IMAGE_DIR,
    IMAGES,
    INSTALL_YAML,
    install_release,
    make_demo,
    publish_host_and_place_pool,
    ready_pool,
)
from cluster.upgrades import (
    Renewer,
    hold_claims,
    newer_operator,
    operator_digest,
    upgrade_step,
)

from batteryop.client import Client
from batteryop.kube.config import KubeConfig
from batteryop.manifests import chart as charts
from batteryop.release import chart as chart_archive
from batteryop.release import main as release
from batteryop.release import oci
from batteryop.testing.helmcli import ready_helm
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.node import KubeNode

FORCE = "--force-conflicts"
"""What an upgrade and a rollback need: the chart's config.json takes the Host set the host
registry wrote back (as Flux's kustomize-controller does); the registry writes it again."""
RELEASE_DIR = INSTALL_YAML.parent
"""Where the release's Manifests package puts the chart archive, beside install.yaml."""


@pytest.fixture(scope="module")
def chart() -> install.HelmChart:
    (archive,) = RELEASE_DIR.glob(f"{charts.NAME}-*.tgz")
    return install.HelmChart(ready_helm(), archive)


@pytest.fixture(scope="module")
def installed(node: KubeNode, chart: install.HelmChart) -> install.Installed:
    return install_release(node, chart=chart)


@pytest.fixture(scope="module")
def first_tag(installed: install.Installed) -> str:
    return installed.images[release.OPERATOR].tag


@pytest.fixture(scope="module")
def demo(node: KubeNode, installed: install.Installed) -> str:
    return make_demo(node)


@pytest.mark.req("DP-112", "DP-115", "TD-116", "TD-122")
def test_helm_installs_every_workload_and_a_claim_binds_and_runs(
    node: KubeNode, installed: install.Installed, first_tag: str, demo: str
) -> None:
    publish_host_and_place_pool(node, "demo")
    ready_pool(node, "demo", 1)
    assert operator_digest(node) == {oci.index_digest(IMAGE_DIR / release.OPERATOR, first_tag)}
    client = Client(
        namespace=DEMO_NAMESPACE,
        kube_config=KubeConfig.from_dict(node.cp.kubeconfig()),
        serving_ca=installed.pki.exec_serving_ca,
    )
    with client, client.claim("demo", HOLDER, name="through-helm", timeout=180) as claim:
        result = claim.exec(["echo", "installed by helm"], timeout_seconds=60)
    assert (result.exit_code, result.stdout) == (0, b"installed by helm\n")


def helm_move(
    node: KubeNode,
    chart: install.HelmChart,
    installed: install.Installed,
    args: tuple[str, ...],
    want_digest: str,
) -> tuple[str, float]:
    """`helm <args>`; once every workload is rolled out and the operator runs `want_digest`,
    the release's revision and the seconds it took."""
    started = time.monotonic()
    install.helm(node, chart, installed.images, *args)
    install.wait_workloads(node)
    assert operator_digest(node) == {want_digest}
    status = install.helm(node, chart, installed.images, "status", install.HELM_RELEASE)
    revision = next(line for line in status.splitlines() if line.startswith("REVISION:"))
    return revision.split(":", 1)[1].strip(), time.monotonic() - started


@pytest.mark.req("CL-030", "CL-061", "DP-002", "DP-112", "TD-122")
def test_an_upgrade_and_a_rollback_through_helm_lose_no_claim(
    node: KubeNode,
    installed: install.Installed,
    chart: install.HelmChart,
    first_tag: str,
    demo: str,
    tmp_path: Path,
) -> None:
    held, leases = hold_claims(node)
    out = tmp_path / "next"
    new, new_digest = newer_operator(node, first_tag, out)
    old_digest = oci.index_digest(IMAGE_DIR / release.OPERATOR, first_tag)
    assert new_digest != old_digest
    digests = {
        name: oci.index_digest(IMAGE_DIR / name, first_tag)
        for name in IMAGES
        if name not in (install.FAKE_BATTERY, release.OPERATOR)
    }
    version, _ = release.write_chart(out, {**digests, release.OPERATOR: new_digest}, new)
    newer = install.HelmChart(chart.helm, out / chart_archive.archive_name(version))
    # --force-conflicts: the host registry owns config.json's Host set (Install says why).
    moves = [
        ("upgrade", newer, ("upgrade", install.HELM_RELEASE, FORCE), new_digest, "up-"),
        ("rollback", chart, ("rollback", install.HELM_RELEASE, "1", FORCE), old_digest, "down-"),
    ]
    renewer = Renewer(node, held)
    with renewer:
        for what, source, args, digest, prefix in moves:
            move = partial(helm_move, node, source, installed, args, digest)
            upgrade_step(node, held, leases, what, move, prefix)
    assert renewer.error is None, renewer.error


@pytest.mark.req("TD-113")
def test_nothing_left_the_machine(node: KubeNode, installed: install.Installed) -> None:
    assert node.machine.dropped() == 0
