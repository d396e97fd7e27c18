"""install.yaml on the real node, as a platform team installs it (issue 23).

1. Each Node is already a Host: the Host Image's boot steps ran on it before it joined
   (`hostboot`: host.env, the kubelet's Host labels, flintlockd's certificate folder, the guest
   bridge and firewall); the install adds the stand-in thin pool (`make_host`).
2. The release's images are mirrored into the node's registry the way a user mirrors them
   (skopeo, digests unchanged), and a kustomization points install.yaml at the mirror with an
   `images:` override, so every image stays pinned by its digest. The one swap: poolmgrd
   cannot be built here, so battery's container runs the fake battery's image (built by the
   release targets as `fake-battery`, never named in install.yaml).
3. cert-manager runs on the node (`addons.install_cert_manager`, its controllers from its pinned
   module), then install.yaml goes in, either with `kubectl apply -k`; or, with `flux=`, the
   way a Flux user installs it: Flux's controllers (`addons.install_flux`), the Manifests
   artifact pushed to the node's registry, an `OCIRepository` and a `Kustomization` with the
   same image overrides; or, with `chart=`, the release's Helm chart by `helm install`, its
   values taking every image from the mirror (`helm_values`). cert-manager issues the Certificates install.yaml asks for; battery's volume is
   a local PersistentVolume on the first Node, or one every Node mounts (`battery_volume`).
4. Once the Exec Agent Pod has written flintlockd's certificate (by CSR, through the CSR
   approver Pod), flintlockd starts on the node as the Host Image's path unit starts it: our
   fake flintlockd, a host service in the node's namespaces on the address network.sh wrote.

Two stand-ins remain, each because of this machine, not of the code under test: the fake
flintlockd (no hypervisor) and a device-mapper entry under the node's own `/sys/block` (the
kernel here has no device-mapper, so no thin pool can exist; the Exec Agent checks for it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import yaml

from batteryop.api import names
from batteryop.release import main as release
from batteryop.release import oci
from batteryop.testing import helmcli
from batteryop.testing.kubenode import addons, hostboot, registry
from batteryop.testing.kubenode.node import REGISTRY, KubeNode, Member, NodeError
from batteryop.testing.progress import Heartbeat

NAMESPACE: Final = names.OPERATOR_NAMESPACE
POOLMGRD: Final = "ghcr.io/liquidmetal-dev/poolmgrd"
FAKE_BATTERY: Final = "fake-battery"
THIN_POOL: Final = "flintlock-thinpool"
EXEC_AGENT_UID: Final = 65532
BATTERY_VOLUME: Final = "battery-data-node"
Storage = Literal["local", "any-node"]
"""Where battery's volume can be mounted (`battery_volume`)."""
CERTIFICATES: Final = (
    names.SERVING_CA_SECRET,
    names.CLIENT_CA_SECRET,
    names.EXEC_AGENT_SERVING_CA_SECRET,
    names.BATTERY_CLIENT_SECRET,
)
"""install.yaml's Certificates, each named as the Secret it writes."""
WORKLOADS: Final = (
    f"deployment/{names.OPERATOR_DEPLOYMENT}",
    f"deployment/{names.CSR_APPROVER_NAME}",
    f"daemonset/{names.EXEC_AGENT_NAME}",
)


@dataclass(frozen=True)
class Mirrored:
    """An image of ours in the node's registry."""

    source: str
    """The repository install.yaml names (e.g. ghcr.io/phoban01/battery-operator)."""
    mirror: str
    """The same repository in the node's registry."""
    tag: str
    digest: str


@dataclass(frozen=True)
class Pki:
    """What cert-manager issued for install.yaml's Certificates (PEM), read from their Secrets."""

    serving_ca: bytes
    """flintlockd's serving CA (what battery and the Exec Agent trust flintlockd by)."""
    client_ca: bytes
    exec_serving_ca: bytes
    """The Exec Agents' serving CA (CT-101): what a client trusts for an Exec Agent."""
    battery_client: bytes
    """battery's client certificate for flintlockd."""
    battery_client_ca: bytes
    """The CA in that Secret (`ca.crt`): the client CA that signed it."""


@dataclass(frozen=True)
class HelmChart:
    """A chart archive (`helm package`'s, as the release writes it) to install with `helm`."""

    helm: Path
    archive: Path


HELM_RELEASE: Final = "battery-operator"
HELM_NAMESPACE: Final = "default"
"""Where Helm keeps its record of the release (the chart makes its own Namespace)."""


def helm_values(images: Mapping[str, Mirrored]) -> dict[str, object]:
    """A user's values for a mirror: every image from the mirror's registry (`imageRegistry`,
    the chart's repositories, tags and digests kept), battery's the fake's."""
    fake = images[FAKE_BATTERY]
    host, _, repository = fake.mirror.partition("/")
    battery = {"registry": host, "repository": repository, "tag": fake.tag, "digest": fake.digest}
    return {"imageRegistry": REGISTRY, "images": {"battery": battery}}


def helm(node: KubeNode, chart: HelmChart, images: Mapping[str, Mirrored], *args: str) -> str:
    """`helm <args> [<the chart's archive> -f <helm_values>] --namespace HELM_NAMESPACE` as the
    cluster's admin (the archive and values go with `install` and `upgrade`); its output."""
    command = [*args]
    if args[0] in ("install", "upgrade"):
        values = node.state / "helm-values.yaml"
        values.write_text(yaml.safe_dump(helm_values(images)))
        command += [str(chart.archive), "-f", str(values)]
    command += ["--namespace", HELM_NAMESPACE]
    done = helmcli.run(chart.helm, *command, kubeconfig=node.cp.admin_kubeconfig, timeout=300)
    if done.returncode != 0:
        raise NodeError(f"helm {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class FluxSource:
    """The Manifests artifact (an OCI layout, as the release writes it) for a Flux install."""

    layout: Path
    tag: str
    repository: str = "battery-operator/manifests"


def make_host(node: KubeNode, member: Member) -> None:
    """What a Host has that this machine cannot give a Node: the stand-in thin pool. (The
    Host Image's boot steps ran before the Node joined, `hostboot`; its kubelet registered
    the Host label, HI-074.)"""
    fake_sys_block(node, member)


def fake_sys_block(node: KubeNode, member: Member) -> None:
    """A Node's /sys/block: the machine's devices, plus a device-mapper device named as the
    Host Image's thin pool (no device-mapper in this kernel; see the module docstring)."""
    folder = member.state / "sys-block"
    folder.mkdir()
    for entry in Path("/sys/block").iterdir():
        (folder / entry.name).symlink_to(os.readlink(entry))
    device = folder / "dm-0"
    (device / "dm").mkdir(parents=True)
    (device / "dm" / "name").write_text(f"{THIN_POOL}\n")
    (device / "dev").write_text("253:0\n")
    (device / "size").write_text("0\n")
    node.node_run(["mount", "--bind", str(folder), "/sys/block"], member=member)


def mirror(node: KubeNode, layouts: Mapping[str, Path]) -> dict[str, Mirrored]:
    """Push each image layout (repository name -> OCI layout) to the node's registry."""
    out = {}
    for repository, layout in layouts.items():
        tags = oci.read_index(layout)["manifests"]
        assert isinstance(tags, list)
        tag = str(tags[0]["annotations"]["org.opencontainers.image.ref.name"])
        source = POOLMGRD if repository == FAKE_BATTERY else release.image_repository(repository)
        # Ours under their own path, as a mirror keeps it (so Helm's `imageRegistry` finds
        # them); the fake battery under its own name, never as poolmgrd's.
        path = repository if repository == FAKE_BATTERY else source.partition("/")[2]
        registry.push(node, layout, tag, path)
        out[repository] = Mirrored(source, f"{REGISTRY}/{path}", tag, oci.index_digest(layout, tag))
    return out


def kustomization(folder: Path, install_yaml: Path, images: Mapping[str, Mirrored]) -> Path:
    """A kustomization of install.yaml that takes every image from the node's registry: the
    user's way to mirror (the digests install.yaml pins stay; battery's image is swapped)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(install_yaml, folder / "install.yaml")
    entries = image_overrides(images)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["install.yaml"],
                "images": entries,
            },
            sort_keys=False,
        )
    )
    return folder


def image_overrides(images: Mapping[str, Mirrored]) -> list[dict[str, str]]:
    """The `images:` entries that take every image from the node's registry (a kustomization's
    and a Flux Kustomization's field alike)."""
    entries: list[dict[str, str]] = []
    for image in images.values():
        entry = {"name": image.source, "newName": image.mirror}
        if image.source == POOLMGRD:
            entry.update(newTag=image.tag, digest=image.digest)
        entries.append(entry)
    return entries


def wait_certificates(node: KubeNode, timeout: float = 180.0) -> Pki:
    """Until cert-manager has issued every Certificate of install.yaml (`kubectl wait` watches
    them); their Secrets' PEMs."""
    objects = [f"certificate/{name}" for name in CERTIFICATES]
    where = ["-n", NAMESPACE, f"--timeout={int(timeout)}s"]
    # Through Flux the namespace itself comes with install.yaml, a little later.
    node.kubectl(["wait", f"namespace/{NAMESPACE}", *where[2:], "--for=create"])
    for each in objects:  # kubectl waits for the creation of one named object at a time
        node.kubectl(["wait", each, *where, "--for=create"])
    node.kubectl(["wait", *objects, *where, "--for=condition=Ready"])
    found = {name: _secret(node, name) for name in CERTIFICATES}
    return Pki(
        serving_ca=found[names.SERVING_CA_SECRET]["tls.crt"],
        client_ca=found[names.CLIENT_CA_SECRET]["tls.crt"],
        exec_serving_ca=found[names.EXEC_AGENT_SERVING_CA_SECRET]["tls.crt"],
        battery_client=found[names.BATTERY_CLIENT_SECRET]["tls.crt"],
        battery_client_ca=found[names.BATTERY_CLIENT_SECRET]["ca.crt"],
    )


def _secret(node: KubeNode, name: str) -> dict[str, bytes]:
    out = node.kubectl(["get", "secret", name, "-n", NAMESPACE, "-o", "jsonpath={.data}"])
    return {k: base64.b64decode(v) for k, v in json.loads(out).items()}


def battery_volume(node: KubeNode, storage: Storage = "local") -> Path:
    """battery's PersistentVolume, for the claim install.yaml makes (DP-003).

    - `local`: a local volume on the first Node, as a cluster's node-local storage is: the
      Pod that mounts it can run on that Node only.
    - `any-node`: a volume every Node can mount, standing in for network-attached storage (a
      CSI block or file volume): the Nodes share this machine's file system, so one hostPath
      folder is the same folder on each, and the operator's Pod can move between them.
    """
    folder = node.state / "volumes" / BATTERY_VOLUME
    folder.mkdir(parents=True)
    os.chown(folder, EXEC_AGENT_UID, EXEC_AGENT_UID)  # battery runs as 65532 too
    spec: dict[str, object] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
    }
    if storage == "any-node":
        spec["hostPath"] = {"path": str(folder), "type": "Directory"}
    else:
        spec["local"] = {"path": str(folder)}
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": [node.members[0].name],
                            }
                        ]
                    }
                ]
            }
        }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": BATTERY_VOLUME},
        "spec": spec,
    }
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(volume))
    return folder


def wait_workloads(node: KubeNode, timeout: float = 300.0) -> None:
    """Until every Deployment and the DaemonSet of install.yaml have rolled out."""
    beat = Heartbeat("Waiting for install.yaml's workloads to roll out")
    for workload in WORKLOADS:
        beat.beat(f"waiting for {workload}", force=True)
        node.kubectl(["rollout", "status", "-n", NAMESPACE, workload, f"--timeout={int(timeout)}s"])


def start_flintlockd(
    node: KubeNode,
    member: Member,
    command: Sequence[str] | None = None,
    timeout: float = 120.0,
) -> None:
    """flintlockd on a Node once its Exec Agent wrote its certificate (the Host Image's
    flintlockd.path starts flintlockd.service on it): the fake, as a host service, run as
    `command` (default: this interpreter with this process's import path)."""
    certs = member.state / "root" / names.FLINTLOCKD_CERT_DIR.lstrip("/")
    node.wait_for(
        f"flintlockd's certificate from the Exec Agent on {member.name}",
        lambda: (certs / names.TLS_CERT_FILE).is_file(),
        timeout=timeout,
    )
    # As flintlockd.service reads it.
    address = hostboot.written(member, "BATTERY_FLINTLOCKD_ENV")["FLINTLOCKD_ADDRESS"]
    env = dict(os.environ)
    if command is None:
        # The node's commands start in its root folder: every import path absolute.
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
        command = [sys.executable, "-m", "batteryop.testing.fake_flintlock"]
    node.spawn(
        member.proc("flintlockd"),
        [
            *command,
            f"--address={address}",
            f"--port={names.FLINTLOCKD_PORT}",
            f"--tls-cert={names.FLINTLOCKD_CERT_DIR}/{names.TLS_CERT_FILE}",
            f"--tls-key={names.FLINTLOCKD_CERT_DIR}/{names.TLS_KEY_FILE}",
            f"--tls-client-ca={names.FLINTLOCKD_CERT_DIR}/client-ca.crt",
            f"--state-dir={member.state / 'flintlockd'}",
            "--enable-ssh-proxy-api",  # as the Host Image's flintlockd.service
        ],
        member=member,
        env=env,
    )


def diagnose(node: KubeNode, lines: int = 15) -> str:
    """The Pods, the namespace's Events and each container's last log lines: what a person
    looks at when an install does not become ready."""
    parts = [node.kubectl(["get", "pods", "-A", "-o", "wide"], check=False)]
    parts.append(
        node.kubectl(["get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"], check=False)[
            -4000:
        ]
    )
    names_ = node.kubectl(["get", "pods", "-n", NAMESPACE, "-o", "name"], check=False).split()
    for pod in names_:
        parts.append(f"--- {pod}")
        parts.append(
            node.kubectl(
                ["logs", "-n", NAMESPACE, pod, "--all-containers", "--prefix", f"--tail={lines}"],
                check=False,
            )
        )
    for member in node.members:
        if member.proc("flintlockd") in node.procs:
            parts += [
                f"--- flintlockd (host service of {member.name})",
                node.procs[member.proc("flintlockd")].tail(lines),
            ]
    return "\n".join(parts)


@dataclass(frozen=True)
class Installed:
    times: dict[str, float]
    """Seconds per phase: `mirror`, `cert_manager` (its image built and its controller
    running), `flux` (Flux's controllers running; Flux installs only), `apply_to_certificates`
    (install.yaml applied to every Certificate issued), `apply_to_ready` (to every workload
    rolled out)."""
    pki: Pki
    images: dict[str, Mirrored]
    applied: str
    """What `kubectl apply -k` printed, or the Flux Kustomization's status."""


def install(
    node: KubeNode,
    install_yaml: Path,
    layouts: Mapping[str, Path],
    flintlockd: Sequence[str] | None = None,
    *,
    flux: FluxSource | None = None,
    chart: HelmChart | None = None,
    storage: Storage = "local",
) -> Installed:
    """Everything above, in order (`flintlockd`: see `start_flintlockd`; `flux`: install
    through Flux from that artifact, `chart`: with `helm install` of that chart, instead of
    `kubectl apply -k`; `storage`: see `battery_volume`)."""
    times: dict[str, float] = {}
    beat = Heartbeat(f"Installing the release on {len(node.members)} Node(s)")
    started = time.monotonic()
    for member in node.members:
        make_host(node, member)
    images = mirror(node, layouts)
    times["mirror"] = time.monotonic() - started
    beat.beat("Hosts made, images mirrored; then cert-manager", force=True)
    started = time.monotonic()
    addons.install_cert_manager(node)
    times["cert_manager"] = time.monotonic() - started
    battery_volume(node, storage)
    beat.beat("cert-manager running; then install.yaml", force=True)
    if flux is not None:
        started = time.monotonic()
        addons.install_flux(node)
        times["flux"] = time.monotonic() - started
    applied = time.monotonic()
    if flux is not None:
        apply_flux_source(node, flux, images)
        applied_output = ""
    elif chart is not None:
        applied_output = helm(node, chart, images, "install", HELM_RELEASE)
    else:
        folder = kustomization(node.state / "kustomize", install_yaml, images)
        applied_output = node.kubectl(["apply", "--server-side", "-k", str(folder)])
    try:
        pki = wait_certificates(node)
        times["apply_to_certificates"] = time.monotonic() - applied
        beat.beat("every Certificate issued; then flintlockd and the workloads", force=True)
        for member in node.members:
            start_flintlockd(node, member, flintlockd)
        wait_workloads(node)
        if flux is not None:
            applied_output = yaml.safe_dump(
                addons.wait_flux_ready(node, "kustomization", FLUX_NAME), sort_keys=False
            )
    except NodeError as err:
        raise NodeError(f"{err}\n{diagnose(node)}") from None
    times["apply_to_ready"] = time.monotonic() - applied
    return Installed(times, pki, images, applied_output)


FLUX_NAME: Final = "battery-operator"
"""The OCIRepository and the Kustomization that install battery-operator through Flux."""


def push_artifact(node: KubeNode, source: FluxSource) -> str:
    """The Manifests artifact into the node's registry; returns Flux's revision for it
    (`<tag>@sha256:...`, what the OCIRepository and Kustomization report)."""
    registry.push(node, source.layout, source.tag, source.repository)
    return f"{source.tag}@{oci.index_digest(source.layout, source.tag)}"


def apply_flux_source(node: KubeNode, source: FluxSource, images: Mapping[str, Mirrored]) -> str:
    """Push the artifact and point Flux at it (create, or move an existing OCIRepository to
    this tag); returns the artifact's revision."""
    revision = push_artifact(node, source)
    objects = [
        addons.oci_repository(FLUX_NAME, source.repository, source.tag),
        addons.flux_kustomization_object(FLUX_NAME, image_overrides(images)),
    ]
    node.kubectl(["apply", "--server-side", "-f", "-"], stdin=yaml.safe_dump_all(objects))
    return revision


__all__ = ["FAKE_BATTERY", "FluxSource", "Installed", "Mirrored", "Pki", "install"]
