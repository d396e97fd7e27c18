"""install.yaml: every object the Operator needs, in apply order, rendered from code.

`render()` returns, in the order `kubectl apply -f install.yaml` must create them: the
Namespace, both CRDs, the MutatingAdmissionPolicy storing our finalizers at create and its
binding (`admission`), the ServiceAccount, the ClusterRoles, the ClusterRoleBinding, the Role and
its binding (`rbac`), battery's config ConfigMap, battery's PersistentVolumeClaim, the
Operator Deployment, then the Exec Agent's ServiceAccount, RBAC, admission policy and DaemonSet
(`exec_agent`), then the CSR approver's ServiceAccount, RBAC and Deployment (`csr_approver`),
last cert-manager's Issuers and Certificates for the three CAs and battery's client certificate
(`cert_manager`; cert-manager must be installed first). `to_yaml()` writes them as one
multi-document stream; `main()` writes the file.

The Operator Pod (DP-001..DP-006, reference layout of §1.5):

- one replica replaced with `Recreate` (DP-002), `shareProcessNamespace` so the host registry
  can signal battery (DP-006); the Pod runs as 65532, non-root, seccomp RuntimeDefault; every
  container has a read-only root filesystem, no privilege escalation, no capabilities, and
  requests and limits.
- `automountServiceAccountToken: false`; a projected token (with the API server's CA and the
  namespace) is mounted into `operator` and `host-registry`, the two containers that call the
  API. battery, a third-party binary, gets no token.
- `operator`: our flags; readiness `/readyz` (which includes battery, DP-012) and liveness
  `/healthz` on the health port.
- `host-registry`: the host registry's pex (`batteryop.host_registry`): admits Nodes as Hosts,
  writes battery's ConfigMap and restarts battery by signalling `poolmgrd` through the shared
  process namespace (DP-006, DP-007), or adds and removes Hosts with battery's host RPCs where
  it has them; it mounts the ConfigMap and battery's TLS files read-only to see when the kubelet
  has synced them. Health and metrics on their own ports (8082, 8083).
- `battery`: poolmgrd 0.4.0 on 127.0.0.1:50051 only (DP-001), its database on the PVC
  (DP-003), its config from the ConfigMap (DP-004) and its flintlockd client certificate and
  the Hosts' serving CA from a projected volume (DP-005). It has no probes: it listens on
  loopback, where the kubelet cannot reach it; the operator's readiness reports it instead.

The Namespace, both CRDs and battery's PersistentVolumeClaim carry `helm.sh/resource-policy:
keep` (`KEPT`): uninstalling the Helm chart made of these objects (`chart`) leaves them and so
every Pool, claim and battery's database (DP-113); kubectl and Flux ignore it.

battery's config holds the placeholder Host `_no-hosts` until the host registry writes the
real Host set: poolmgrd v0.4.0 refuses an empty `hosts` list.

Requirements: DP-001, DP-002, DP-003, DP-004, DP-005, DP-006, DP-012, DP-113; DP-020, DP-021 (`rbac`);
CT-021, CT-023, CT-106 (`cert_manager`).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from batteryop.api import crds, names
from batteryop.battery import configfile, database
from batteryop.manifests import admission, cert_manager, csr_approver, exec_agent, rbac

Obj = dict[str, Any]

# --- Images ----------------------------------------------------------------------------------

BATTERY_IMAGE: Final = "ghcr.io/liquidmetal-dev/poolmgrd:0.4.0"
"""poolmgrd 0.4.0, battery's own release image (its multi-arch manifest is tagged without v)."""

SNAPSHOT_OPERATOR_IMAGE: Final = "ghcr.io/phoban01/battery-operator:v0.4.1"
"""The operator image `install.snapshot.yaml` is rendered with."""

# --- Names only the Manifests use (not in batteryop.api.names) -------------------------------

NAME_LABEL: Final = "app.kubernetes.io/name"
"""Kubernetes' recommended label naming the application."""
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
"""Kubernetes' recommended label naming the larger application."""
APP_NAME: Final = "battery-operator"
"""Value of NAME_LABEL and PART_OF_LABEL on every object of install.yaml."""
COMMON_LABELS: Final[Mapping[str, str]] = {NAME_LABEL: APP_NAME, PART_OF_LABEL: APP_NAME}
"""The labels every object of install.yaml carries."""
COMPONENT_OPERATOR: Final = "operator"
"""COMPONENT_LABEL value of the Operator Deployment, its Pod and its RBAC."""
HELM_RESOURCE_POLICY: Final = "helm.sh/resource-policy"
"""Helm's annotation; `keep` leaves the object in place when the chart is uninstalled (DP-113)."""
KEPT: Final[Mapping[str, str]] = {HELM_RESOURCE_POLICY: "keep"}
"""On the objects whose loss loses state: the Namespace, both CRDs (deleting one deletes every
Pool or claim) and battery's database volume. kubectl and Flux ignore the annotation."""

OPERATOR_CONTAINER: Final = "operator"
HOST_REGISTRY_CONTAINER: Final = "host-registry"
BATTERY_CONTAINER: Final = "battery"
HOST_REGISTRY_IMAGE_NAME: Final = "host-registry"
"""The host registry's image sits beside the operator's (`<operator repo>/host-registry`)."""
BATTERY_PROCESS_NAME: Final = "poolmgrd"
"""battery's process, which the host registry signals through the shared process namespace."""

# --- Ports, addresses and paths --------------------------------------------------------------

BATTERY_ADDRESS: Final = configfile.DEFAULT_API_ADDRESS
"""battery's gRPC API: loopback only (DP-001, DP-010)."""
BATTERY_METRICS_ADDRESS: Final = configfile.DEFAULT_METRICS_ADDRESS
"""battery's metrics, on loopback too."""
HEALTH_PORT: Final = 8081
METRICS_PORT: Final = 8080
HEALTH_PORT_NAME: Final = "health"
METRICS_PORT_NAME: Final = "metrics"
HOST_REGISTRY_HEALTH_PORT: Final = 8082
HOST_REGISTRY_METRICS_PORT: Final = 8083
HOST_REGISTRY_HEALTH_PORT_NAME: Final = "registry-health"
HOST_REGISTRY_METRICS_PORT_NAME: Final = "registry-metric"
READYZ_PATH: Final = "/readyz"
HEALTHZ_PATH: Final = "/healthz"

CONFIG_DIR: Final = "/etc/battery/config"
CONFIG_KEY: Final = "config.json"
CONFIG_FILE: Final = f"{CONFIG_DIR}/{CONFIG_KEY}"
TLS_DIR: Final = configfile.DEFAULT_TLS_DIR
TLS_CERT_KEY: Final = configfile.TLS_CERT_FILE
TLS_KEY_KEY: Final = configfile.TLS_KEY_FILE
SERVING_CA_FILE_NAME: Final = configfile.SERVING_CA_FILE
DATA_DIR: Final = str(database.DEFAULT_DB.parent)
DB_FILE: Final = str(database.DEFAULT_DB)
TOKEN_DIR: Final = rbac.TOKEN_DIR
TOKEN_EXPIRATION_SECONDS: Final = rbac.TOKEN_EXPIRATION_SECONDS
KUBE_ROOT_CA_CONFIG_MAP: Final = rbac.KUBE_ROOT_CA_CONFIG_MAP

NO_HOSTS_NAME: Final = configfile.NO_HOSTS_NAME
"""Placeholder Host in battery's config while there is none (poolmgrd refuses an empty list)."""
NO_HOSTS_ADDRESS: Final = configfile.NO_HOSTS_ADDRESS
"""Address of the placeholder Host; `.invalid` never resolves (RFC 2606)."""

BATTERY_DATA_SIZE: Final = "1Gi"
RUN_AS: Final = 65532
"""The distroless `nonroot` user and group."""

VOLUME_CONFIG: Final = "battery-config"
VOLUME_TLS: Final = "battery-tls"
VOLUME_DATA: Final = "battery-data"
VOLUME_TOKEN: Final = rbac.VOLUME_TOKEN
VOLUME_TMP_OPERATOR: Final = "operator-tmp"
VOLUME_TMP_HOST_REGISTRY: Final = "host-registry-tmp"
VOLUME_TMP_BATTERY: Final = "battery-tmp"

SNAPSHOT_FILE: Final = "install.snapshot.yaml"


# --- Helpers ---------------------------------------------------------------------------------


def labels(component: str | None = None) -> dict[str, str]:
    """The common labels, with `app.kubernetes.io/component` when given."""
    out = dict(COMMON_LABELS)
    if component is not None:
        out[names.COMPONENT_LABEL] = component
    return out


def _meta(name: str, namespace: str | None, component: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(component)
    return meta


def host_registry_image_for(operator_image: str) -> str:
    """`<repo>/host-registry:<tag>` beside `<repo>:<tag>`, as the release names sub-images.

    A digest cannot be carried over (the other image has its own), so an operator image pinned
    by digest needs the host registry's image named explicitly.
    """
    if "@" in operator_image:
        raise ValueError(
            f"operator image {operator_image!r} is pinned by digest: name the host registry's "
            "image too (host_registry_image / --host-registry-image)"
        )
    slash = operator_image.rfind("/")
    colon = operator_image.rfind(":")
    if colon > slash:
        repo, tag = operator_image[:colon], operator_image[colon:]
    else:
        repo, tag = operator_image, ""
    return f"{repo}/{HOST_REGISTRY_IMAGE_NAME}{tag}"


# --- battery's config ------------------------------------------------------------------------


def battery_config() -> Obj:
    """poolmgrd v0.4.0's config before the host registry has written any Host (DP-004).

    The API is plaintext on loopback: privacy comes from the binding (DP-001). The placeholder
    Host names the TLS files every real Host uses, so the file passes battery's Host checks.
    The host registry renders the same file (`batteryop.battery.configfile`) with its Hosts.
    """
    return configfile.render(
        {}, api_address=BATTERY_ADDRESS, metrics_address=BATTERY_METRICS_ADDRESS, tls_dir=TLS_DIR
    )


def battery_config_text() -> str:
    """battery's config as the ConfigMap holds it: stable bytes for the same content."""
    return configfile.render_text(
        {}, api_address=BATTERY_ADDRESS, metrics_address=BATTERY_METRICS_ADDRESS, tls_dir=TLS_DIR
    )


# --- Objects ---------------------------------------------------------------------------------


def namespace_object(namespace: str) -> Obj:
    meta = _meta(namespace, None)
    meta["annotations"] = dict(KEPT)  # DP-113
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def crd_objects() -> list[Obj]:
    """Both CRDs as `batteryop.api.crds` ships them, with the common labels added."""
    out = []
    for crd in crds.all_crds():
        meta = crd.setdefault("metadata", {})
        meta["labels"] = {**meta.get("labels", {}), **labels()}
        meta["annotations"] = {**meta.get("annotations", {}), **KEPT}  # DP-113
        out.append(crd)
    return out


def config_map_object(namespace: str) -> Obj:
    """battery's config (DP-004); the host registry rewrites `config.json` with the Hosts."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(names.BATTERY_CONFIG_MAP, namespace, names.COMPONENT_BATTERY),
        "data": {CONFIG_KEY: battery_config_text()},
    }


def pvc_object(namespace: str) -> Obj:
    """battery's SQLite database (DP-003): one Pod writes it, so ReadWriteOnce."""
    meta = _meta(names.BATTERY_DATA_PVC, namespace, names.COMPONENT_BATTERY)
    meta["annotations"] = dict(KEPT)  # DP-113: uninstalling the chart keeps the database
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": BATTERY_DATA_SIZE}},
        },
    }


def container_security() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def container_resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Obj:
    return {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu_limit, "memory": memory_limit},
    }


def _mount(volume: str, path: str, *, read_only: bool = True) -> Obj:
    mount: Obj = {"name": volume, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    return mount


def _pod_namespace_env() -> Obj:
    return {
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
    }


def _probe(path: str, *, initial: int, period: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": HEALTH_PORT_NAME},
        "initialDelaySeconds": initial,
        "periodSeconds": period,
    }


def operator_container(image: str) -> Obj:
    return {
        "name": OPERATOR_CONTAINER,
        "image": image,
        "args": [
            f"--battery-address={BATTERY_ADDRESS}",
            f"--health-probe-bind-address=:{HEALTH_PORT}",
            f"--metrics-bind-address=:{METRICS_PORT}",
        ],
        "env": [_pod_namespace_env()],
        "ports": [
            {"name": HEALTH_PORT_NAME, "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": _probe(READYZ_PATH, initial=5, period=10),  # DP-012
        "livenessProbe": _probe(HEALTHZ_PATH, initial=15, period=20),
        "resources": container_resources("50m", "128Mi", "1", "512Mi"),
        "securityContext": container_security(),
        "volumeMounts": [
            _mount(VOLUME_TOKEN, TOKEN_DIR),
            rbac.tmp_mount(VOLUME_TMP_OPERATOR),
            # DP-116: `battery-operator db backup` copies battery's live database from here.
            # Writable: a reader of a WAL database writes its shared-memory index (-shm).
            _mount(VOLUME_DATA, DATA_DIR, read_only=False),
        ],
    }


def host_registry_container(image: str) -> Obj:
    """The host registry's pex with the names of this Pod (IN-*, DP-004, DP-006..DP-008)."""
    return {
        "name": HOST_REGISTRY_CONTAINER,
        "image": image,
        "args": [
            f"--battery-address={BATTERY_ADDRESS}",
            f"--battery-metrics-address={BATTERY_METRICS_ADDRESS}",
            f"--battery-config-map={names.BATTERY_CONFIG_MAP}",
            f"--battery-config-file={CONFIG_FILE}",
            f"--battery-tls-dir={TLS_DIR}",
            f"--battery-process-name={BATTERY_PROCESS_NAME}",
            "--settle-time=30s",  # IN-011
            "--restart-window=1m",  # IN-012
            "--drain-timeout=30s",  # IN-013
            f"--health-probe-bind-address=:{HOST_REGISTRY_HEALTH_PORT}",
            f"--metrics-bind-address=:{HOST_REGISTRY_METRICS_PORT}",
        ],
        "env": [_pod_namespace_env()],
        "ports": [
            {
                "name": HOST_REGISTRY_HEALTH_PORT_NAME,
                "containerPort": HOST_REGISTRY_HEALTH_PORT,
                "protocol": "TCP",
            },
            {
                "name": HOST_REGISTRY_METRICS_PORT_NAME,
                "containerPort": HOST_REGISTRY_METRICS_PORT,
                "protocol": "TCP",
            },
        ],
        "readinessProbe": {
            "httpGet": {"path": READYZ_PATH, "port": HOST_REGISTRY_HEALTH_PORT_NAME},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": HEALTHZ_PATH, "port": HOST_REGISTRY_HEALTH_PORT_NAME},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
        },
        "resources": container_resources("20m", "64Mi", "500m", "256Mi"),
        "securityContext": container_security(),
        "volumeMounts": [
            _mount(VOLUME_TOKEN, TOKEN_DIR),
            # DP-006, DP-007: restart battery only once this mount shows what was written.
            _mount(VOLUME_CONFIG, CONFIG_DIR),
            _mount(VOLUME_TLS, TLS_DIR),
            rbac.tmp_mount(VOLUME_TMP_HOST_REGISTRY),
        ],
    }


def battery_container(image: str) -> Obj:
    return {
        "name": BATTERY_CONTAINER,
        "image": image,
        "args": [f"-config={CONFIG_FILE}", f"-db={DB_FILE}", "-log-level=info"],
        "resources": container_resources("50m", "64Mi", "1", "512Mi"),
        "securityContext": container_security(),
        "volumeMounts": [
            _mount(VOLUME_CONFIG, CONFIG_DIR),  # DP-004
            _mount(VOLUME_TLS, TLS_DIR),  # DP-005
            _mount(VOLUME_DATA, DATA_DIR, read_only=False),  # DP-003
            rbac.tmp_mount(VOLUME_TMP_BATTERY),
        ],
    }


def _volumes() -> list[Obj]:
    return [
        rbac.token_volume(),
        {
            "name": VOLUME_CONFIG,
            "configMap": {"name": names.BATTERY_CONFIG_MAP, "defaultMode": 0o444},
        },
        {
            # DP-005: the client certificate and key from their Secret, the Hosts' serving CA
            # from the published bundle (no key). Optional: battery starts on the placeholder
            # Host before the certificates exist, and the kubelet adds them when they do.
            "name": VOLUME_TLS,
            "projected": {
                "defaultMode": 0o440,
                "sources": [
                    {
                        "secret": {
                            "name": names.BATTERY_CLIENT_SECRET,
                            "optional": True,
                            "items": [
                                {"key": TLS_CERT_KEY, "path": TLS_CERT_KEY},
                                {"key": TLS_KEY_KEY, "path": TLS_KEY_KEY},
                            ],
                        }
                    },
                    {
                        "configMap": {
                            "name": names.CA_BUNDLE_CONFIG_MAP,
                            "optional": True,
                            "items": [
                                {
                                    "key": names.SERVING_CA_BUNDLE_KEY,
                                    "path": SERVING_CA_FILE_NAME,
                                }
                            ],
                        }
                    },
                ],
            },
        },
        {
            "name": VOLUME_DATA,
            "persistentVolumeClaim": {"claimName": names.BATTERY_DATA_PVC},
        },
        rbac.tmp_volume(VOLUME_TMP_OPERATOR),
        rbac.tmp_volume(VOLUME_TMP_HOST_REGISTRY),
        rbac.tmp_volume(VOLUME_TMP_BATTERY),
    ]


def pod_spec(*, operator_image: str, host_registry_image: str, battery_image: str) -> Obj:
    """The Operator Pod (DP-001, DP-002, DP-006)."""
    return {
        "serviceAccountName": rbac.OPERATOR_SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": True,  # DP-006: the host registry signals battery
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "terminationGracePeriodSeconds": 30,
        "containers": [
            operator_container(operator_image),
            host_registry_container(host_registry_image),
            battery_container(battery_image),
        ],
        "volumes": _volumes(),
    }


def deployment_object(
    namespace: str, *, operator_image: str, host_registry_image: str, battery_image: str
) -> Obj:
    selector = {NAME_LABEL: APP_NAME, names.COMPONENT_LABEL: COMPONENT_OPERATOR}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(names.OPERATOR_DEPLOYMENT, namespace, COMPONENT_OPERATOR),
        "spec": {
            "replicas": 1,  # DP-002
            "strategy": {"type": "Recreate"},  # DP-002: never two batteries on one database
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels(COMPONENT_OPERATOR)},
                "spec": pod_spec(
                    operator_image=operator_image,
                    host_registry_image=host_registry_image,
                    battery_image=battery_image,
                ),
            },
        },
    }


def render(
    *,
    operator_image: str,
    battery_image: str = BATTERY_IMAGE,
    namespace: str = names.OPERATOR_NAMESPACE,
    host_registry_image: str | None = None,
    exec_agent_image: str | None = None,
    csr_approver_image: str | None = None,
) -> list[Obj]:
    """Every object of install.yaml, in apply order, as fresh dicts the caller may change.

    `host_registry_image` defaults to `<operator repo>/host-registry:<operator tag>`, and
    `exec_agent_image` to `<operator repo>/exec-agent:<operator tag>`.
    """
    if not operator_image.strip():
        raise ValueError("operator_image must name an image")
    registry_image = host_registry_image or host_registry_image_for(operator_image)
    agent_image = exec_agent_image or exec_agent.exec_agent_image_for(operator_image)
    approver_image = csr_approver_image or csr_approver.approver_image_for(operator_image)
    objects: list[Obj] = [namespace_object(namespace), *crd_objects()]
    objects += admission.finalizer_policy_objects(labels(COMPONENT_OPERATOR))
    objects += rbac.objects(namespace=namespace, labels=labels(COMPONENT_OPERATOR))
    objects += [
        config_map_object(namespace),
        pvc_object(namespace),
        deployment_object(
            namespace,
            operator_image=operator_image,
            host_registry_image=registry_image,
            battery_image=battery_image,
        ),
    ]
    objects += exec_agent.objects(namespace, labels(names.COMPONENT_EXEC_AGENT), agent_image)
    objects += csr_approver.objects(namespace, labels(csr_approver.COMPONENT), approver_image)
    objects += cert_manager.objects(namespace, labels(cert_manager.COMPONENT))  # CT-021, CT-023
    return copy.deepcopy(objects)


# --- YAML ------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings (battery's config) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)

HEADER: Final = (
    "# battery-operator install.yaml, rendered by batteryop.manifests (do not edit by hand).\n"
)


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """The objects as one multi-document YAML stream, in order, each document opened by ---."""
    return HEADER + documents(objects)


def documents(objects: Sequence[Mapping[str, Any]]) -> str:
    """`to_yaml` without its header line (the chart's templates are written the same way)."""
    return yaml.dump_all(
        [dict(o) for o in objects],
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )


def snapshot_text() -> str:
    """install.snapshot.yaml as shipped in the package."""
    return (
        resources.files("batteryop.manifests").joinpath(SNAPSHOT_FILE).read_text(encoding="utf-8")
    )


def render_snapshot() -> str:
    """What install.snapshot.yaml must hold."""
    return to_yaml(render(operator_image=SNAPSHOT_OPERATOR_IMAGE))


# --- Entry point -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Write install.yaml (`-o -` writes to standard output)."""
    parser = argparse.ArgumentParser(
        prog="python -m batteryop.manifests", description="Write battery-operator's install.yaml."
    )
    parser.add_argument("--operator-image", required=True, help="the operator image reference")
    parser.add_argument(
        "--host-registry-image",
        help="the host registry image (default: <operator repo>/host-registry:<operator tag>)",
    )
    parser.add_argument(
        "--exec-agent-image",
        help="the Exec Agent image (default: <operator repo>/exec-agent:<operator tag>)",
    )
    parser.add_argument(
        "--csr-approver-image",
        help="the CSR approver image (default: <operator repo>/csr-approver:<operator tag>)",
    )
    parser.add_argument("--battery-image", default=BATTERY_IMAGE, help="the poolmgrd image")
    parser.add_argument("--namespace", default=names.OPERATOR_NAMESPACE)
    parser.add_argument("-o", "--output", default="install.yaml", help="file to write, or -")
    args = parser.parse_args(argv)
    try:
        text = to_yaml(
            render(
                operator_image=args.operator_image,
                battery_image=args.battery_image,
                namespace=args.namespace,
                host_registry_image=args.host_registry_image,
                exec_agent_image=args.exec_agent_image,
                csr_approver_image=args.csr_approver_image,
            )
        )
    except ValueError as err:
        parser.error(str(err))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0
