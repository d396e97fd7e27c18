"""install.yaml on the real node, as a platform team installs it (issue 23).

1. The Node becomes a Host the way the Host Image makes one: the image's own boot steps run on
   it (`host-config.sh` writes host.env, `flintlockd-certs.sh` makes flintlockd's certificate
   folder for the Exec Agent), and it is labelled as a Host (`kubectl label`).
2. The release's images are mirrored into the node's registry the way a user mirrors them
   (skopeo, digests unchanged), and a kustomization points install.yaml at the mirror with an
   `images:` override, so every image stays pinned by its digest. The one swap: poolmgrd
   cannot be built here, so battery's container runs the fake battery's image (built by the
   release targets as `fake-battery`, never named in install.yaml).
3. `kubectl apply -k`. Until cert-manager runs here (issue 27) its CRDs are installed and the
   three Secrets its Certificates would write are written in its place; battery's volume is a
   hostPath PersistentVolume the claim binds to.
4. Once the Exec Agent Pod has written flintlockd's certificate (by CSR, through the CSR
   approver Pod), flintlockd starts on the node as the Host Image's path unit starts it: our
   fake flintlockd, a host service in the node's namespaces on the Node's address.

Two stand-ins remain, each because of this machine, not of the code under test: the fake
flintlockd (no hypervisor) and a device-mapper entry under the node's own `/sys/block` (the
kernel here has no device-mapper, so no thin pool can exist; the Exec Agent checks for it).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

import batteryop  # pants: no-infer-dep (the package folder itself, see make_host)
from batteryop.api import names
from batteryop.release import main as release
from batteryop.release import oci
from batteryop.testing import certmanager
from batteryop.testing.kubenode.machine import NODE_ADDRESS
from batteryop.testing.kubenode.node import NODE_NAME, REGISTRY, KubeNode, NodeError
from batteryop.tls import CertificateAuthority, KeyPair

NAMESPACE: Final = names.OPERATOR_NAMESPACE
HOST_DEFINITION: Final = Path("src/images/host/rootfs")
POOLMGRD: Final = "ghcr.io/liquidmetal-dev/poolmgrd"
FAKE_BATTERY: Final = "fake-battery"
THIN_POOL: Final = "flintlock-thinpool"
EXEC_AGENT_UID: Final = 65532
BATTERY_VOLUME: Final = "battery-data-node"
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
    """The CAs cert-manager's Certificates would make, and battery's client certificate."""

    serving_ca: CertificateAuthority
    client_ca: CertificateAuthority
    battery_client: KeyPair


def find_definition(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / HOST_DEFINITION / "usr/libexec/battery/lib.sh").is_file():
            return folder / HOST_DEFINITION
    raise NodeError(f"cannot find {HOST_DEFINITION} above {here}")


def make_host(node: KubeNode) -> None:
    """The Host Image's boot steps on the node, the stand-in thin pool, and the Host label."""
    definition = find_definition()
    root = node.state / "root"
    share = root / "usr/share/battery"
    share.mkdir(parents=True, exist_ok=True)
    shutil.copy2(definition / "usr/share/battery/image.env", share / "image.env")
    # host-config.sh runs the image's Python (batteryop.hostimage) from the image's path.
    python = root / "usr/lib/battery/python"
    python.mkdir(parents=True, exist_ok=True)
    (python / "batteryop").symlink_to(Path(batteryop.__file__).parent)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BATTERY_ROOT": str(root),
        "BATTERY_LIB": str(definition / "usr/libexec/battery/lib.sh"),
        "PYTHON": sys.executable,
    }
    scripts = definition / "usr/libexec/battery"
    for script in ("host-config.sh", "flintlockd-certs.sh"):
        proc = subprocess.run(
            ["bash", str(scripts / script)], env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise NodeError(f"{script}: exit {proc.returncode}: {proc.stderr.strip()}")
    fake_sys_block(node)
    node.kubectl(
        ["label", "--overwrite", "node", NODE_NAME, f"{names.HOST_LABEL}={names.HOST_LABEL_VALUE}"]
    )


def fake_sys_block(node: KubeNode) -> None:
    """The node's /sys/block: the machine's devices, plus a device-mapper device named as the
    Host Image's thin pool (no device-mapper in this kernel; see the module docstring)."""
    folder = node.state / "sys-block"
    folder.mkdir()
    for entry in Path("/sys/block").iterdir():
        (folder / entry.name).symlink_to(os.readlink(entry))
    device = folder / "dm-0"
    (device / "dm").mkdir(parents=True)
    (device / "dm" / "name").write_text(f"{THIN_POOL}\n")
    (device / "dev").write_text("253:0\n")
    (device / "size").write_text("0\n")
    node.node_run(["mount", "--bind", str(folder), "/sys/block"])


def mirror(node: KubeNode, layouts: Mapping[str, Path]) -> dict[str, Mirrored]:
    """Push each image layout (repository name -> OCI layout) to the node's registry."""
    out = {}
    for repository, layout in layouts.items():
        tags = oci.read_index(layout)["manifests"]
        assert isinstance(tags, list)
        tag = str(tags[0]["annotations"]["org.opencontainers.image.ref.name"])
        node.push(layout, tag, repository)
        source = POOLMGRD if repository == FAKE_BATTERY else release.image_repository(repository)
        out[repository] = Mirrored(
            source, f"{REGISTRY}/{repository}", tag, oci.index_digest(layout, tag)
        )
    return out


def kustomization(folder: Path, install_yaml: Path, images: Mapping[str, Mirrored]) -> Path:
    """A kustomization of install.yaml that takes every image from the node's registry: the
    user's way to mirror (the digests install.yaml pins stay; battery's image is swapped)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(install_yaml, folder / "install.yaml")
    entries: list[dict[str, str]] = []
    for image in images.values():
        entry = {"name": image.source, "newName": image.mirror}
        if image.source == POOLMGRD:
            entry.update(newTag=image.tag, digest=image.digest)
        entries.append(entry)
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


def stand_in_for_cert_manager(node: KubeNode) -> Pki:
    """cert-manager's CRDs, and the Secrets its Certificates in install.yaml would write."""
    for crd in certmanager.crd_files():
        node.kubectl(["apply", "--server-side", "-f", str(crd)])
    serving = CertificateAuthority.create(names.SERVING_CA_SECRET)
    client = CertificateAuthority.create(names.CLIENT_CA_SECRET)
    battery_id = names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)
    battery = client.issue("battery", hosts=[battery_id], client=True)
    node.kubectl(["create", "namespace", NAMESPACE])
    secrets = [
        _tls_secret(names.SERVING_CA_SECRET, serving.pair, serving.cert_pem),
        _tls_secret(names.CLIENT_CA_SECRET, client.pair, client.cert_pem),
        _tls_secret(names.BATTERY_CLIENT_SECRET, battery, client.cert_pem),
    ]
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(secrets))
    return Pki(serving, client, battery)


def _tls_secret(name: str, pair: KeyPair, ca_pem: bytes) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {
            "tls.crt": b64(pair.cert_pem),
            "tls.key": b64(pair.key_pem),
            "ca.crt": b64(ca_pem),
        },
    }


def battery_volume(node: KubeNode) -> Path:
    """A hostPath PersistentVolume on the node for battery's claim (a cluster's storage)."""
    folder = node.state / "volumes" / BATTERY_VOLUME
    folder.mkdir(parents=True)
    os.chown(folder, EXEC_AGENT_UID, EXEC_AGENT_UID)  # battery runs as 65532 too
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": BATTERY_VOLUME},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(folder), "type": "Directory"},
        },
    }
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(volume))
    return folder


def wait_workloads(node: KubeNode, timeout: float = 300.0) -> None:
    """Until every Deployment and the DaemonSet of install.yaml have rolled out."""
    for workload in WORKLOADS:
        node.kubectl(["rollout", "status", "-n", NAMESPACE, workload, f"--timeout={int(timeout)}s"])


def start_flintlockd(
    node: KubeNode, command: Sequence[str] | None = None, timeout: float = 120.0
) -> None:
    """flintlockd on the node once the Exec Agent wrote its certificate (the Host Image's
    flintlockd.path starts flintlockd.service on it): the fake, as a host service, run as
    `command` (default: this interpreter with this process's import path)."""
    certs = node.state / "root" / names.FLINTLOCKD_CERT_DIR.lstrip("/")
    node.wait_for(
        "flintlockd's certificate from the Exec Agent",
        lambda: (certs / names.TLS_CERT_FILE).is_file(),
        timeout=timeout,
    )
    env = dict(os.environ)
    if command is None:
        # The node's commands start in its root folder: every import path absolute.
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
        command = [sys.executable, "-m", "batteryop.testing.fake_flintlock"]
    node.spawn(
        "flintlockd",
        [
            *command,
            f"--address={NODE_ADDRESS}",
            f"--port={names.FLINTLOCKD_PORT}",
            f"--tls-cert={names.FLINTLOCKD_CERT_DIR}/{names.TLS_CERT_FILE}",
            f"--tls-key={names.FLINTLOCKD_CERT_DIR}/{names.TLS_KEY_FILE}",
            f"--tls-client-ca={names.FLINTLOCKD_CERT_DIR}/client-ca.crt",
            f"--state-dir={node.state / 'flintlockd'}",
        ],
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
    if "flintlockd" in node.procs:
        parts += ["--- flintlockd (host service)", node.procs["flintlockd"].tail(lines)]
    return "\n".join(parts)


@dataclass(frozen=True)
class Installed:
    times: dict[str, float]
    """Seconds per phase: `mirror`, `apply_to_ready`."""
    pki: Pki
    images: dict[str, Mirrored]
    applied: str
    """What `kubectl apply -k` printed."""


def install(
    node: KubeNode,
    install_yaml: Path,
    layouts: Mapping[str, Path],
    flintlockd: Sequence[str] | None = None,
) -> Installed:
    """Everything above, in order (`flintlockd`: see `start_flintlockd`)."""
    times: dict[str, float] = {}
    started = time.monotonic()
    make_host(node)
    images = mirror(node, layouts)
    times["mirror"] = time.monotonic() - started
    pki = stand_in_for_cert_manager(node)
    battery_volume(node)
    folder = kustomization(node.state / "kustomize", install_yaml, images)
    applied = time.monotonic()
    applied_output = node.kubectl(["apply", "--server-side", "-k", str(folder)])
    try:
        start_flintlockd(node, flintlockd)
        wait_workloads(node)
    except NodeError as err:
        raise NodeError(f"{err}\n{diagnose(node)}") from None
    times["apply_to_ready"] = time.monotonic() - applied
    return Installed(times, pki, images, applied_output)


__all__ = ["FAKE_BATTERY", "Installed", "Mirrored", "install"]
