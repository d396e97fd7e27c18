"""The CSR approver's part of install.yaml: its ServiceAccount, least-privilege RBAC and
Deployment.

The approver (`batteryop.csr_approver`, CT-*) runs as `names.CSR_APPROVER_NAME`, its own
identity (no other identity of install.yaml may read the CA Secrets: CT-022, DP-021):

ClusterRole `names.CSR_APPROVER_NAME`
- `certificatesigningrequests`: get/list/watch (it follows every request, by list and watch).
- `certificatesigningrequests/approval` and `/status`: update (approve or deny; write the
  signed certificate or the `Failed` condition).
- `signers` by name: approve on battery's three (`names.SIGNERS`: approving and denying both
  need it), sign on the two serving signers only (CT-102: a `flintlockd-client` request is
  denied, never signed). The API server refuses both for any other signer.
- `nodes`: get (a serving request's Node and its addresses). No list, no watch, no write: it
  can never patch a Node.

Role `names.CSR_APPROVER_NAME` in the Operator namespace
- `secrets` by name, only the three CA Secrets (flintlockd's serving CA, the Exec Agents'
  serving CA, and the client CA, whose certificate it publishes: CT-005): get/list/watch (list
  and watch with a `metadata.name` field selector). No other Secret, anywhere.
- `configmaps`: create (the CA bundle and the address pins are made on first use; RBAC cannot
  name an object that does not exist yet for create), and by name, the two ConfigMaps it
  writes: get/list/watch/patch.

The Deployment runs one replica of the approver's image, whose entrypoint runs its pex (no
`command` here: one would replace the entrypoint, `release.images`), with the trust
domain the Manifests configure (CT-020), its health and metrics ports, a projected token, and
the restricted Pod security settings every container of install.yaml has.

Requirements: CT-020 (trust domain set), CT-022 and CT-106 (only this identity reads the CA
Secrets), CT-102 (sign only on the serving signers), DP-021.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from batteryop.api import names
from batteryop.manifests import rbac

Obj = dict[str, Any]

APPROVER_IMAGE_NAME: Final = "csr-approver"
"""The approver's image sits beside the operator's (`<operator repo>/csr-approver`)."""
APPROVER_CONTAINER: Final = "csr-approver"
COMPONENT: Final = "csr-approver"
"""`app.kubernetes.io/component` of the approver's objects."""
HEALTH_PORT: Final = 8081
METRICS_PORT: Final = 8080
RUN_AS: Final = 65532
TOKEN_DIR: Final = rbac.TOKEN_DIR
VOLUME_TMP: Final = "csr-approver-tmp"

CSRS: Final = "certificatesigningrequests"


def approver_image_for(operator_image: str) -> str:
    """`<repo>/csr-approver:<tag>` beside `<repo>:<tag>`."""
    return rbac.image_beside(
        operator_image, APPROVER_IMAGE_NAME, "csr_approver_image / --csr-approver-image"
    )


SIGNED: Final = (names.FLINTLOCKD_SERVING_SIGNER, names.EXEC_AGENT_SERVING_SIGNER)
"""The only signers the approver signs for (CT-102)."""


def cluster_rules() -> list[Obj]:
    """The approver's cluster-wide rules (module docstring: why each)."""
    return [
        rbac.rule(rbac.CERTIFICATES_GROUP, [CSRS], ["get", "list", "watch"]),
        rbac.rule(rbac.CERTIFICATES_GROUP, [f"{CSRS}/approval", f"{CSRS}/status"], ["update"]),
        rbac.rule(rbac.CERTIFICATES_GROUP, ["signers"], ["approve"], names.SIGNERS),
        rbac.rule(rbac.CERTIFICATES_GROUP, ["signers"], ["sign"], SIGNED),  # CT-102
        rbac.rule("", ["nodes"], ["get"]),
    ]


def namespace_rules(
    *,
    serving_ca_secret: str = names.SERVING_CA_SECRET,
    client_ca_secret: str = names.CLIENT_CA_SECRET,
    exec_agent_serving_ca_secret: str = names.EXEC_AGENT_SERVING_CA_SECRET,
    ca_bundle_config_map: str = names.CA_BUNDLE_CONFIG_MAP,
    address_pins_config_map: str = names.ADDRESS_PINS_CONFIG_MAP,
) -> list[Obj]:
    """The approver's rules in its namespace: its three CA Secrets, its two ConfigMaps (CT-022,
    CT-106)."""
    secrets = (serving_ca_secret, client_ca_secret, exec_agent_serving_ca_secret)
    return [
        rbac.rule("", ["secrets"], ["get", "list", "watch"], secrets),
        rbac.rule("", ["configmaps"], ["create"]),
        rbac.rule(
            "",
            ["configmaps"],
            ["get", "list", "watch", "patch"],
            (ca_bundle_config_map, address_pins_config_map),
        ),
    ]


def container(image: str) -> Obj:
    return {
        "name": APPROVER_CONTAINER,
        "image": image,
        "args": [
            f"--trust-domain={names.DEFAULT_TRUST_DOMAIN}",  # CT-020
            f"--exec-agent-service-account={names.EXEC_AGENT_NAME}",
            f"--health-probe-bind-address=:{HEALTH_PORT}",
            f"--metrics-bind-address=:{METRICS_PORT}",
        ],
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [
            {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "health"},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "health"},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
        },
        "resources": {
            "requests": {"cpu": "20m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": rbac.VOLUME_TOKEN, "mountPath": TOKEN_DIR, "readOnly": True},
            rbac.tmp_mount(VOLUME_TMP),  # found missing by the real node (issue 23)
        ],
    }


def deployment_object(namespace: str, labels: Mapping[str, str], image: str) -> Obj:
    selector = {k: v for k, v in labels.items() if k != "app.kubernetes.io/part-of"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels, namespace),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two approvers racing on one request
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": names.CSR_APPROVER_NAME,
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "containers": [container(image)],
                    "volumes": [rbac.token_volume(), rbac.tmp_volume(VOLUME_TMP)],
                },
            },
        },
    }


def objects(namespace: str, labels: Mapping[str, str], image: str) -> list[Obj]:
    """ServiceAccount, ClusterRole and binding, Role and binding, Deployment; apply order."""
    subjects = [{"kind": "ServiceAccount", "name": names.CSR_APPROVER_NAME, "namespace": namespace}]
    rbac_group = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels, namespace),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": f"{rbac_group}/v1",
            "kind": "ClusterRole",
            "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels),
            "rules": cluster_rules(),
        },
        {
            "apiVersion": f"{rbac_group}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels),
            "roleRef": {
                "apiGroup": rbac_group,
                "kind": "ClusterRole",
                "name": names.CSR_APPROVER_NAME,
            },
            "subjects": subjects,
        },
        {
            "apiVersion": f"{rbac_group}/v1",
            "kind": "Role",
            "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels, namespace),
            "rules": namespace_rules(),
        },
        {
            "apiVersion": f"{rbac_group}/v1",
            "kind": "RoleBinding",
            "metadata": rbac.meta(names.CSR_APPROVER_NAME, labels, namespace),
            "roleRef": {"apiGroup": rbac_group, "kind": "Role", "name": names.CSR_APPROVER_NAME},
            "subjects": subjects,
        },
        deployment_object(namespace, labels, image),
    ]
