"""cert-manager and Flux on the real node, from their pinned Go modules (issue 27).

- **cert-manager**: its controllers from `github.com/cert-manager/cert-manager` at the version
  whose CRDs judge install.yaml's objects (`3rdparty/go/certmanager`). cert-manager's own
  controller program sits in a nested module of its repository that is not published as a Go
  module, so `3rdparty/go/certmanager/main.go` (ours) links in the controllers install.yaml
  needs and runs them; everything they do is cert-manager's code (TD-116).
- **Flux**: source-controller and kustomize-controller at the versions the pinned Flux CLI v2.9.5
  installs (`3rdparty/go/fluxcontrollers`), installed from Flux's own manifests: each
  controller's module carries its CRDs and Deployment (`config/`), and the Flux CLI's module the
  install kustomization around them (`manifests/`: the service accounts, patches, RBAC); the
  release's download links in it are swapped for those module files (TD-117).

Each controller runs as a Pod from an image holding only its static binary, built here with
buildah and pushed to the node's registry; the kubelet pulls it like any image.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from batteryop.release import gomodules
from batteryop.testing import certmanager, fluxcli
from batteryop.testing.controlplane.gobuild import pinned_version
from batteryop.testing.kubenode import registry
from batteryop.testing.kubenode.binaries import CERT_MANAGER, FLUX, FLUX_CONTROLLERS
from batteryop.testing.kubenode.node import REGISTRY_FOR_PODS, KubeNode, NodeError

CERT_MANAGER_PINS: Final = CERT_MANAGER.module
CERT_MANAGER_NAMESPACE: Final = "cert-manager"
CERT_MANAGER_IMAGE: Final = "cert-manager/controller"
HEALTHZ_PORT: Final = 9403
"""Where our cert-manager command answers /readyz (informers synced) and /livez."""

FLUX_PINS: Final = FLUX.module
FLUX_CLI_PINS: Final = fluxcli.PINS
FLUX_CLI_MODULE: Final = fluxcli.MODULE
FLUX_NAMESPACE: Final = "flux-system"
USER: Final = "65532:65532"
"""Every controller image's user (their Deployments ask for a non-root one)."""


@dataclass(frozen=True)
class Flux:
    """Flux's install as applied: the kustomization folder and each controller's image."""

    folder: Path
    images: dict[str, str]


# -- cert-manager ---------------------------------------------------------------------------


def cert_manager_objects(image: str) -> list[dict[str, Any]]:
    """cert-manager's namespace, identity, RBAC and Deployment for the controllers our command
    runs (the Certificate lifecycle, the self-signed and CA issuers, the approver). RBAC is
    what those controllers read and write, nothing for ACME, Ingress or Gateway objects."""
    ns = CERT_MANAGER_NAMESPACE
    labels = {"app.kubernetes.io/name": "cert-manager", "app.kubernetes.io/component": "controller"}
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": ["cert-manager.io"],
            "resources": ["certificates", "certificaterequests", "issuers", "clusterissuers"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["cert-manager.io"],
            "resources": [
                "certificates/status",
                "certificaterequests/status",
                "issuers/status",
                "clusterissuers/status",
                "certificates/finalizers",
                "certificaterequests/finalizers",
            ],
            "verbs": ["update", "patch"],
        },
        {
            # The approver approves requests for cert-manager's own issuer types.
            "apiGroups": ["cert-manager.io"],
            "resources": ["signers"],
            "resourceNames": ["issuers.cert-manager.io/*", "clusterissuers.cert-manager.io/*"],
            "verbs": ["approve"],
        },
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": ["events.k8s.io"],
            "resources": ["events"],
            "verbs": ["create", "patch"],
        },
        {
            # The informers cert-manager's controller context always starts.
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["ingresses"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "cert-manager", "namespace": ns},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "cert-manager-controller"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "cert-manager-controller"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cert-manager-controller",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "cert-manager", "namespace": ns}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "cert-manager", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "cert-manager",
                        "securityContext": {
                            "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "controller",
                                "image": image,
                                "args": [f"--cluster-resource-namespace={ns}", "-v=2"],
                                "ports": [{"name": "healthz", "containerPort": HEALTHZ_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/readyz", "port": "healthz"},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/livez", "port": "healthz"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                            }
                        ],
                    },
                },
            },
        },
    ]


def install_cert_manager(node: KubeNode) -> str:
    """cert-manager's CRDs and its controllers, running; returns the controller's image."""
    binary = CERT_MANAGER.ensure()["cert-manager-controller"]
    tag = pinned_version(gomodules.find_pins(CERT_MANAGER_PINS), certmanager.MODULE)
    image = registry.push_binary(node, binary, CERT_MANAGER_IMAGE, tag, user=USER)
    for crd in certmanager.crd_files():
        node.kubectl(["apply", "--server-side", "-f", str(crd)])
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(cert_manager_objects(image)))
    rollout = ["rollout", "status", "-n", CERT_MANAGER_NAMESPACE, "deployment/cert-manager"]
    node.kubectl([*rollout, "--timeout=180s"])
    return image


# -- Flux -----------------------------------------------------------------------------------


def flux_kustomization(folder: Path, images: Mapping[str, str]) -> Path:
    """Flux's install kustomization for source-controller and kustomize-controller, from the
    modules' own files: Flux CLI's `manifests/` with each base's release links replaced by
    the controller module's `config/` (its CRDs, Deployment and Service)."""
    cli = gomodules.download(gomodules.find_pins(FLUX_CLI_PINS), [FLUX_CLI_MODULE])
    manifests = cli[FLUX_CLI_MODULE] / "manifests"
    modules = gomodules.download(
        gomodules.find_pins(FLUX_PINS), [f"github.com/fluxcd/{c}" for c in FLUX_CONTROLLERS]
    )
    folder.mkdir(parents=True)
    for controller in FLUX_CONTROLLERS:
        config = modules[f"github.com/fluxcd/{controller}"] / "config"
        base = folder / controller
        shutil.copytree(manifests / "bases" / controller, base)
        for f in base.iterdir():
            f.chmod(0o644)  # the module cache is read-only
        crds = sorted((config / "crd" / "bases").glob("*.yaml"))
        _concat(base / "crds.yaml", crds)
        manager = [config / "manager" / n for n in ("service.yaml", "deployment.yaml")]
        _concat(base / "deployment.yaml", [p for p in manager if p.is_file()])
        spec = yaml.safe_load((base / "kustomization.yaml").read_text())
        spec["resources"] = [
            _local(r, controller) if r.startswith("https://") else r for r in spec["resources"]
        ]
        (base / "kustomization.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copytree(manifests / "rbac", folder / "rbac")
    for name in ("namespace.yaml", "labels.yaml"):
        shutil.copy(manifests / "install" / name, folder / name)
    for f in folder.rglob("*"):
        if f.is_file():
            f.chmod(0o644)
        elif f.is_dir():
            f.chmod(0o755)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": FLUX_NAMESPACE,
                "resources": ["namespace.yaml", *FLUX_CONTROLLERS, "rbac"],
                "transformers": ["labels.yaml"],
                "images": [
                    {"name": f"fluxcd/{c}", "newName": ref.rsplit(":", 1)[0], "newTag": tag}
                    for c, ref in images.items()
                    for tag in [ref.rsplit(":", 1)[1]]
                ],
            },
            sort_keys=False,
        )
    )
    return folder


def _local(url: str, controller: str) -> str:
    name = url.rsplit("/", 1)[1]
    if name == f"{controller}.crds.yaml":
        return "crds.yaml"
    if name == f"{controller}.deployment.yaml":
        return "deployment.yaml"
    raise NodeError(f"Flux's {controller} base names a release file we cannot map: {url}")


def _concat(out: Path, files: Sequence[Path]) -> None:
    out.write_text("".join(f"---\n{f.read_text()}\n" for f in files))


def install_flux(node: KubeNode) -> Flux:
    """source-controller and kustomize-controller, running in flux-system."""
    built = FLUX.ensure()
    pins = gomodules.find_pins(FLUX_PINS)
    images = {
        c: registry.push_binary(
            node, built[c], f"fluxcd/{c}", pinned_version(pins, f"github.com/fluxcd/{c}"), user=USER
        )
        for c in FLUX_CONTROLLERS
    }
    folder = flux_kustomization(node.state / "flux-install", images)
    node.kubectl(["apply", "--server-side", "-k", str(folder)])
    for c in FLUX_CONTROLLERS:
        node.kubectl(
            ["rollout", "status", "-n", FLUX_NAMESPACE, f"deployment/{c}", "--timeout=180s"]
        )
    return Flux(folder, images)


def oci_repository(name: str, repository: str, tag: str) -> dict[str, Any]:
    """An OCIRepository for an artifact in the node's registry (plain HTTP, so `insecure`)."""
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": name, "namespace": FLUX_NAMESPACE},
        "spec": {
            "interval": "10m",
            "url": f"oci://{REGISTRY_FOR_PODS}/{repository}",
            "ref": {"tag": tag},
            "insecure": True,
        },
    }


def flux_kustomization_object(
    name: str, images: Sequence[Mapping[str, str]], timeout: str = "5m"
) -> dict[str, Any]:
    """A Flux Kustomization applying the OCIRepository `name`'s install.yaml, with the image
    overrides a mirror needs (the same entries as a kustomization's `images:`)."""
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": FLUX_NAMESPACE},
        "spec": {
            "interval": "10m",
            "sourceRef": {"kind": "OCIRepository", "name": name},
            "path": "./",
            "prune": True,
            "wait": True,
            "timeout": timeout,
            "images": [dict(i) for i in images],
        },
    }


def wait_flux_ready(
    node: KubeNode, kind: str, name: str, revision: str | None = None, timeout: float = 300.0
) -> dict[str, Any]:
    """Until the Flux object has applied (Kustomization) or fetched (OCIRepository) `revision`,
    where given, and is Ready; returns its status. `kubectl wait` watches the object."""
    where = ["-n", FLUX_NAMESPACE, f"--timeout={int(timeout)}s"]
    try:
        if revision is not None:
            field = (
                "lastAppliedRevision" if kind.startswith("kustomization") else "artifact.revision"
            )
            node.kubectl(
                ["wait", kind, name, *where, f"--for=jsonpath={{.status.{field}}}={revision}"]
            )
        node.kubectl(["wait", kind, name, *where, "--for=condition=Ready"])
    except NodeError as err:
        got = node.kubectl(["get", kind, name, "-n", FLUX_NAMESPACE, "-o", "yaml"], check=False)
        raise NodeError(
            f"{kind}/{name} not Ready at {revision or 'any revision'}: {err}\n{got}"
        ) from None
    out = node.kubectl(["get", kind, name, "-n", FLUX_NAMESPACE, "-o", "json"])
    return dict(json.loads(out).get("status", {}))


__all__ = [
    "Flux",
    "flux_kustomization_object",
    "install_cert_manager",
    "install_flux",
    "oci_repository",
    "wait_flux_ready",
]
