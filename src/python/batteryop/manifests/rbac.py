"""The Manifests' RBAC: the Operator identity's least privilege, and the roles users aggregate.

The Operator's ServiceAccount (`OPERATOR_SERVICE_ACCOUNT`, used by the operator and
host-registry containers; battery gets no token) is bound to:

ClusterRole `MANAGER_ROLE`
- `pools`, `microvmclaims`: get/list/watch (the controllers' watches) and patch/update (adding
  and removing the finalizers in metadata: CL-001, CL-020, PO-001, PO-044). No create and no
  delete: Pools and claims are made and removed by users, never by the Operator.
- `pools/status`, `microvmclaims/status`: patch/update. The Operator is the only identity the
  Manifests create that may write them (DP-020, RS-024).
- `pools/finalizers`, `microvmclaims/finalizers`: patch/update. Not a served subresource: the
  OwnerReferencesPermissionEnforcement admission plugin asks for it before an object may name a
  Pool or a claim as an owner with `blockOwnerDeletion`.
- `nodes`: get/list/watch. The host registry builds the Host set from Nodes (and their
  cordons); the claim controller reads the Exec Agent's Node report (`HostReady`). No write.
- `events.k8s.io` `events`: create/patch (the event recorder; patch folds a repeated event).
- No `coordination.k8s.io` leases: there is no leader election. One replica with `Recreate`
  (DP-002) means the old Pod is gone before the new one starts, and battery's database is on a
  ReadWriteOnce volume (DP-003); a second Operator would also bring its own battery, which a
  lease could not keep off that database anyway.

Role `MANAGER_ROLE` in the Operator namespace
- `configmaps` by name: only `names.BATTERY_CONFIG_MAP`, get/list/watch/patch/update (the host
  registry writes it, DP-004; the Pool controller watches its `hosts` annotation, PO-010).
  list and watch by name work with a `metadata.name` field selector. No create: install.yaml
  ships the ConfigMap.
- `secrets`: only those in `OPERATOR_SECRETS`, by name, get/list/watch; none today. battery's
  flintlockd client certificate reaches the Pod as a projected volume (kubelet reads it, not
  the Operator), and the host registry sees a renewed certificate in its own mount (DP-007).
  Nothing anywhere grants Secrets outside the namespace (DP-021).
- Nothing else: no Pods, no RBAC objects, no namespaces.

For users (aggregated by kube-controller-manager into the built-in roles)
- `CLAIM_EDITOR_ROLE`, aggregated into `edit` (and through `edit` into `admin`): microvmclaims
  create/delete/get/list/watch/patch. Not `microvmclaims/status`: a claim's owner may create,
  renew (patch `spec.renewTime`) and delete it, never write its status (DP-020).
- `VIEWER_ROLE`, aggregated into `view` (and through `view` into `edit` and `admin`): pools and
  microvmclaims get/list/watch.

Requirements: DP-020, DP-021; CL-001, CL-020, PO-001, PO-044 (finalizers); RS-024 (status).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from batteryop.api import names

Obj = dict[str, Any]

# --- Names only the Manifests use (not in batteryop.api.names) -------------------------------

OPERATOR_SERVICE_ACCOUNT: Final = "battery-operator-controller-manager"
"""The Operator Pod's ServiceAccount: the Operator identity of DP-020 and DP-021."""
MANAGER_ROLE: Final = "battery-operator-manager"
"""Name of the Operator's ClusterRole, its Role in the Operator namespace, and their bindings."""
CLAIM_EDITOR_ROLE: Final = "battery-operator-claim-editor"
"""ClusterRole aggregated into `edit`: create, renew and delete claims (not their status)."""
VIEWER_ROLE: Final = "battery-operator-viewer"
"""ClusterRole aggregated into `view`: read Pools and claims."""

AGGREGATE_TO_EDIT_LABEL: Final = "rbac.authorization.k8s.io/aggregate-to-edit"
"""Kubernetes' label that aggregates a ClusterRole's rules into the built-in `edit`."""
AGGREGATE_TO_VIEW_LABEL: Final = "rbac.authorization.k8s.io/aggregate-to-view"
"""Kubernetes' label that aggregates a ClusterRole's rules into the built-in `view`."""

OPERATOR_SECRETS: Final[tuple[str, ...]] = ()
"""Secrets in its own namespace the Operator identity may read, by name (DP-021). None today."""

# --- Verbs -----------------------------------------------------------------------------------

READ: Final = ("get", "list", "watch")
WRITE: Final = ("patch", "update")
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})
"""Verbs that change an object; used by the checks on who may write status."""

CORE: Final = ""
EVENTS_GROUP: Final = "events.k8s.io"
AUTHENTICATION_GROUP: Final = "authentication.k8s.io"
CERTIFICATES_GROUP: Final = "certificates.k8s.io"
POLICY_GROUP: Final = "policy"
RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_VERSION: Final = f"{RBAC_GROUP}/v1"

KINDS: Final = (names.POOL_PLURAL, names.CLAIM_PLURAL)


def rule(
    group: str,
    resources: Iterable[str],
    verbs: Iterable[str],
    resource_names: Iterable[str] = (),
) -> Obj:
    """One PolicyRule."""
    out: Obj = {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
    named = list(resource_names)
    if named:
        out["resourceNames"] = named
    return out


def manager_cluster_rules() -> list[Obj]:
    """The Operator's cluster-wide rules (see the module docstring for each one's reason)."""
    return [
        rule(names.GROUP, KINDS, (*READ, *WRITE)),
        rule(names.GROUP, (f"{k}/status" for k in KINDS), WRITE),  # DP-020
        rule(names.GROUP, (f"{k}/finalizers" for k in KINDS), WRITE),
        rule(CORE, ["nodes"], READ),
        rule(EVENTS_GROUP, ["events"], ("create", "patch")),
    ]


def manager_namespace_rules() -> list[Obj]:
    """The Operator's rules in its own namespace: its battery ConfigMap, by name (DP-004)."""
    rules = [rule(CORE, ["configmaps"], (*READ, *WRITE), [names.BATTERY_CONFIG_MAP])]
    if OPERATOR_SECRETS:  # DP-021: only these, only here
        rules.append(rule(CORE, ["secrets"], READ, OPERATOR_SECRETS))
    return rules


def exec_agent_cluster_rules() -> list[Obj]:
    """The Exec Agent identity's rules: review callers' tokens (EA-010); read claims, the one a
    token names fresh for every call (EA-013: get) and all of them followed by a watch for the
    drain guard, which holds a drain while any is Bound on its Host (EA-040: list, watch);
    read and watch its own Node (a cordon starts a drain) and patch Nodes for its Node report
    and the drain start (EA-034, EA-040); and create and read its own CSRs, nothing else with
    them (EA-067). A watch of one Node needs list and watch of Nodes, which RBAC cannot narrow
    to a name that differs per agent; Nodes hold no secrets, and the Operator reads them all
    too. RBAC cannot say "only your own Node, only our annotations": the admission policy of
    EA-051 does."""
    return [
        rule(AUTHENTICATION_GROUP, ["tokenreviews"], ["create"]),
        rule(names.GROUP, [names.CLAIM_PLURAL], READ),
        rule(CORE, ["nodes"], (*READ, "patch")),
        rule(CERTIFICATES_GROUP, ["certificatesigningrequests"], ["create", "get"]),
    ]


def exec_agent_namespace_rules() -> list[Obj]:
    """In the install namespace: read and watch the CA bundle ConfigMap, by name only (the CAs
    its certificates must chain to, EA-066, and flintlockd's client CA, EA-064); get, create
    and delete Pods and create and delete PodDisruptionBudgets, for the drain guard (EA-041).
    Those names differ per agent, so RBAC cannot name them: the admission policy of EA-051
    confines the agent to its own guard."""
    return [
        rule(CORE, ["configmaps"], READ, [names.CA_BUNDLE_CONFIG_MAP]),
        rule(CORE, ["pods"], ("get", "create", "delete")),
        rule(POLICY_GROUP, ["poddisruptionbudgets"], ("create", "delete")),
    ]


def claim_editor_rules() -> list[Obj]:
    """What `edit` gains: claims, without their status (DP-020)."""
    verbs = ("create", "delete", *READ, "patch")
    return [rule(names.GROUP, [names.CLAIM_PLURAL], verbs)]


def viewer_rules() -> list[Obj]:
    """What `view` gains: reading Pools and claims."""
    return [rule(names.GROUP, KINDS, READ)]


def meta(name: str, labels: Mapping[str, str], namespace: str | None = None) -> Obj:
    """An object's `metadata`: its name, namespace (if namespaced) and labels."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def ca_reader_rules() -> list[Obj]:
    """CT-107: the published CA certificates (no key), readable by anyone who logged in."""
    return [rule(CORE, ["configmaps"], ["get"], [names.CA_BUNDLE_CONFIG_MAP])]


def _subject(namespace: str) -> Obj:
    return {"kind": "ServiceAccount", "name": OPERATOR_SERVICE_ACCOUNT, "namespace": namespace}


def objects(*, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    """The ServiceAccount, the ClusterRoles, the Roles and their bindings, in apply order."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(OPERATOR_SERVICE_ACCOUNT, labels, namespace),
            # The Pod mounts a projected token into the containers that use the API only.
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": meta(MANAGER_ROLE, labels),
            "rules": manager_cluster_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": meta(CLAIM_EDITOR_ROLE, {**labels, AGGREGATE_TO_EDIT_LABEL: "true"}),
            "rules": claim_editor_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": meta(VIEWER_ROLE, {**labels, AGGREGATE_TO_VIEW_LABEL: "true"}),
            "rules": viewer_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": meta(MANAGER_ROLE, labels),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": MANAGER_ROLE},
            "subjects": [_subject(namespace)],
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "Role",
            "metadata": meta(MANAGER_ROLE, labels, namespace),
            "rules": manager_namespace_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "RoleBinding",
            "metadata": meta(MANAGER_ROLE, labels, namespace),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": MANAGER_ROLE},
            "subjects": [_subject(namespace)],
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "Role",
            "metadata": meta(names.CA_READER_ROLE, labels, namespace),
            "rules": ca_reader_rules(),
        },
        {
            "apiVersion": RBAC_VERSION,
            "kind": "RoleBinding",
            "metadata": meta(names.CA_READER_ROLE, labels, namespace),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": names.CA_READER_ROLE},
            "subjects": [
                {"kind": "Group", "apiGroup": RBAC_GROUP, "name": names.AUTHENTICATED_GROUP}
            ],
        },
    ]


def image_beside(operator_image: str, name: str, argument: str) -> str:
    """`<repo>/<name>:<tag>` beside the operator's `<repo>:<tag>`; a digest cannot be carried
    over, so an operator image pinned by digest needs `argument` given too."""
    if "@" in operator_image:
        raise ValueError(
            f"operator image {operator_image!r} is pinned by digest: name the {name} image "
            f"too ({argument})"
        )
    slash = operator_image.rfind("/")
    colon = operator_image.rfind(":")
    repo, tag = (
        (operator_image[:colon], operator_image[colon:]) if colon > slash else (operator_image, "")
    )
    return f"{repo}/{name}{tag}"


TOKEN_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Kubernetes clients look for the ServiceAccount token, CA and namespace."""
TOKEN_EXPIRATION_SECONDS: Final = 3607
"""The kubelet's own choice for projected tokens: rotated well before the hour."""
KUBE_ROOT_CA_CONFIG_MAP: Final = "kube-root-ca.crt"
"""The API server's CA bundle, which kube-controller-manager publishes in every namespace."""
VOLUME_TOKEN: Final = "kube-api-access"


TMP_DIR: Final = "/tmp"
TMP_SIZE: Final = "64Mi"
"""Every container's root filesystem is read-only; its PEX unpacks into a /tmp of its own."""


def tmp_volume(name: str) -> Obj:
    """A container's writable /tmp (an emptyDir of `TMP_SIZE`)."""
    return {"name": name, "emptyDir": {"sizeLimit": TMP_SIZE}}


def tmp_mount(name: str) -> Obj:
    return {"name": name, "mountPath": TMP_DIR}


def token_volume(*, namespace_file: bool = True) -> Obj:
    """The projected ServiceAccount token volume (what automounting would give, but only where
    it is mounted): the token, the API server's CA and, with `namespace_file`, the namespace."""
    sources: list[Obj] = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
        {
            "configMap": {
                "name": KUBE_ROOT_CA_CONFIG_MAP,
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
            }
        },
    ]
    if namespace_file:
        field = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
        sources.append({"downwardAPI": {"items": [{"path": "namespace", "fieldRef": field}]}})
    return {"name": VOLUME_TOKEN, "projected": {"defaultMode": 0o444, "sources": sources}}
