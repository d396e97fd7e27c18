"""install.yaml against the real kube-apiserver: every object accepted, and the RBAC proven.

Every rendered object is server-side applied with strict field validation, in order, so the
API server checks each against its real schema. Then, acting as the Operator's ServiceAccount
with a real token, each permission the Operator needs is exercised with a real call, and each
it must not have is refused with a real 403 (SelfSubjectAccessReview only where no real call
exists: the `/finalizers` pseudo-subresource, `update` beside a tested `patch`, RBAC verbs).
Last, users: one bound to the claim editor role, and one bound to `edit` as
kube-controller-manager would aggregate it, create a claim and are refused its status (DP-020).

The test control plane has no kube-controller-manager, so the test performs the ClusterRole
aggregation itself, from the built-in roles' real aggregation rules.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from batteryop.api import names, samples
from batteryop.manifests import rbac, render
from batteryop.testing import certmanager
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    install_crd,
    service_account_client,
    user_client,
)
from batteryop.testing.localstack import wait_finalizer_policy

pytestmark = pytest.mark.controlplane

FIELD_MANAGER = "batteryop-manifests-test"
OPERATOR_IMAGE = "registry.example/battery-operator:v0.0.0-test"
NS = names.OPERATOR_NAMESPACE
SA = rbac.OPERATOR_SERVICE_ACCOUNT


# --- helpers ---------------------------------------------------------------------------------


def forbidden(call: Callable[[], Any]) -> None:
    """`call` must be refused by authorization (403), not fail in any other way."""
    with pytest.raises(k8s.ApiException) as err:
        call()
    assert err.value.status == 403, f"expected 403, got {err.value.status}: {err.value.body}"


def can(
    api: k8s.ApiClient,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str | None = None,
    subresource: str | None = None,
    name: str | None = None,
) -> bool:
    """SelfSubjectAccessReview: may the client's identity do this?"""
    attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    for key, value in (("namespace", namespace), ("subresource", subresource), ("name", name)):
        if value is not None:
            attrs[key] = value
    review = k8s.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }
    )
    return bool(review.status.allowed)


def watch_opens(start: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Open a real watch and return its HTTP status (200 once the server accepts it)."""
    resp = start(*args, watch=True, timeout_seconds=1, _preload_content=False, **kwargs)
    try:
        return int(resp.status)
    finally:
        resp.close()


def subset(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where the server's copy lost or changed something we sent (defaults it adds are fine)."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [f"{path}: not an object"]
        out = []
        for key, value in ours.items():
            if key not in theirs:
                out.append(f"{path}.{key}: dropped")
            else:
                out += subset(value, theirs[key], f"{path}.{key}")
        return out
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return [f"{path}: list changed"]
        out = []
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            out += subset(a, b, f"{path}[{i}]")
        return out
    return [] if ours == theirs else [f"{path}: {ours!r} became {theirs!r}"]


def rules_key(rule: dict[str, Any]) -> str:
    return json.dumps(rule, sort_keys=True)


def aggregated_rules(roles: dict[str, dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The rules kube-controller-manager's aggregation controller would give ClusterRole `name`.

    An aggregated role's rules are the union of those of every ClusterRole its selectors match,
    themselves aggregated first (`view` is aggregated into `edit`, `edit` into `admin`).
    """

    def resolve(role_name: str, seen: frozenset[str]) -> list[dict[str, Any]]:
        role = roles[role_name]
        rule_ = role.get("aggregationRule")
        if not rule_:
            return list(role.get("rules") or [])
        out: dict[str, dict[str, Any]] = {}
        for selector in rule_.get("clusterRoleSelectors") or []:
            assert not selector.get("matchExpressions"), "only matchLabels is emulated"
            wanted = selector.get("matchLabels") or {}
            for other_name, other in roles.items():
                labels = other["metadata"].get("labels") or {}
                if other_name in seen or not wanted.items() <= labels.items():
                    continue
                for r in resolve(other_name, seen | {other_name}):
                    out[rules_key(r)] = r
        return list(out.values())

    return resolve(name, frozenset({name}))


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def installed(admin: k8s.ApiClient) -> list[dict[str, Any]]:
    """install.yaml applied in order with server-side apply; the server's copies returned.

    cert-manager is installed first, as docs/install.md asks: here its CRDs only (of the
    pinned release, `batteryop.testing.certmanager`), since install.yaml's Issuers and
    Certificates are its custom resources.
    """
    certmanager.install_crds(admin)
    dyn = DynamicClient(admin)
    applied = []
    for obj in render.render(operator_image=OPERATOR_IMAGE):
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        result = dyn.server_side_apply(
            resource,
            body=obj,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            query_params=[("fieldValidation", "Strict")],
        )
        applied.append(result.to_dict())
        if obj["kind"] == "CustomResourceDefinition":
            install_crd(admin, obj)  # already there: waits until it is Established
    return applied


@pytest.fixture(scope="module")
def operator(
    controlplane: ControlPlane, installed: list[dict[str, Any]]
) -> Iterator[k8s.ApiClient]:
    """A client with a real token for the ServiceAccount install.yaml made, and its RBAC."""
    api = service_account_client(controlplane, NS, SA, create=False)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def pool_and_claim(
    kube_admin: k8s.ApiClient, namespace: str, installed: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Pool and a claim on it, made by the admin in a fresh namespace (once the API server
    applies install.yaml's finalizer policy)."""
    wait_finalizer_policy(kube_admin, active=True)
    co = k8s.CustomObjectsApi(kube_admin)
    pool = co.create_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.POOL_PLURAL,
        samples.sample_pool(name="p", namespace=namespace),
    )
    claim = co.create_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.CLAIM_PLURAL,
        samples.sample_claim(name="c", pool="p", namespace=namespace),
    )
    return pool, claim


# --- every object is accepted ----------------------------------------------------------------


def test_every_object_is_accepted_as_written(
    admin: k8s.ApiClient, installed: list[dict[str, Any]]
) -> None:
    rendered = render.render(operator_image=OPERATOR_IMAGE)
    assert [o["kind"] for o in installed] == [o["kind"] for o in rendered]
    dyn = DynamicClient(admin)
    for ours in rendered:
        resource = dyn.resources.get(api_version=ours["apiVersion"], kind=ours["kind"])
        meta = ours["metadata"]
        theirs = resource.get(name=meta["name"], namespace=meta.get("namespace")).to_dict()
        assert theirs["metadata"]["uid"]
        lost = subset({k: v for k, v in ours.items() if k != "status"}, theirs)
        assert not lost, f"{ours['kind']} {meta['name']}: {lost}"


@pytest.mark.req("CL-100", "PO-100")
def test_new_pools_and_claims_carry_the_finalizer_from_their_create(
    kube_admin: k8s.ApiClient,
    namespace: str,
    pool_and_claim: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The finalizer policy: the API server's answer to the create already holds it."""
    pool, claim = pool_and_claim
    assert pool["metadata"]["finalizers"] == [names.POOL_FINALIZER]
    assert claim["metadata"]["finalizers"] == [names.CLAIM_FINALIZER]
    co = k8s.CustomObjectsApi(kube_admin)
    # Another finalizer is kept, ours appended once; ours already there is not repeated.
    for given, stored in [
        (["example.com/keep"], ["example.com/keep", names.CLAIM_FINALIZER]),
        ([names.CLAIM_FINALIZER, "example.com/keep"], [names.CLAIM_FINALIZER, "example.com/keep"]),
    ]:
        body = samples.sample_claim(
            name=f"c{len(given)}{given[0][0]}", pool="p", namespace=namespace
        )
        body["metadata"]["finalizers"] = given
        answer = co.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, body
        )
        assert answer["metadata"]["finalizers"] == stored
    # Updates are not touched: a finalizer removed (as the controller does) stays removed.
    patched = co.patch_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.CLAIM_PLURAL,
        "c",
        {"metadata": {"finalizers": None}},
    )
    assert "finalizers" not in patched["metadata"]


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without its resourceVersion and field managers (which carry times)."""
    meta = {
        k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return {**obj, "metadata": meta}


def test_reapplying_changes_nothing(admin: k8s.ApiClient, installed: list[dict[str, Any]]) -> None:
    """install.yaml is idempotent: a second apply of the same objects changes no content.

    (The resourceVersion is not compared: a no-op apply of a PersistentVolumeClaim still bumps it.)
    """
    dyn = DynamicClient(admin)
    for obj in render.render(operator_image=OPERATOR_IMAGE):
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        before = resource.get(name=meta["name"], namespace=meta.get("namespace")).to_dict()
        after = dyn.server_side_apply(
            resource,
            body=obj,
            field_manager=FIELD_MANAGER,
            query_params=[("fieldValidation", "Strict")],
        ).to_dict()
        assert content(after) == content(before), f"{obj['kind']} {meta['name']} changed"


def test_the_pod_meets_the_restricted_pod_security_standard(
    kube_admin: k8s.ApiClient, namespace: str, installed: list[dict[str, Any]]
) -> None:
    core = k8s.CoreV1Api(kube_admin)
    core.patch_namespace(
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    core.create_namespaced_service_account(namespace, {"metadata": {"name": SA}})
    rendered = render.render(operator_image=OPERATOR_IMAGE)
    template = next(
        o
        for o in rendered
        if o["kind"] == "Deployment" and o["metadata"]["name"] == names.OPERATOR_DEPLOYMENT
    )["spec"]["template"]
    spec: dict[str, Any] = template["spec"]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator"}, "spec": spec}
    core.create_namespaced_pod(namespace, body, dry_run="All")
    # The check is live: the same Pod allowed to escalate privileges is refused.
    spec["containers"][2]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    assert err.value.status == 403 and "restricted" in err.value.body


# --- what the Operator identity may do -------------------------------------------------------


@pytest.mark.req("DP-020")
def test_operator_lists_watches_and_patches_pools_and_claims(
    operator: k8s.ApiClient, namespace: str, pool_and_claim: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    co = k8s.CustomObjectsApi(operator)
    for plural, obj, finalizer, status in (
        (names.POOL_PLURAL, pool_and_claim[0], names.POOL_FINALIZER, {"observedGeneration": 1}),
        (names.CLAIM_PLURAL, pool_and_claim[1], names.CLAIM_FINALIZER, {"phase": "Pending"}),
    ):
        name = obj["metadata"]["name"]
        listed = co.list_cluster_custom_object(names.GROUP, names.VERSION, plural)
        assert name in [i["metadata"]["name"] for i in listed["items"]]
        assert watch_opens(co.list_cluster_custom_object, names.GROUP, names.VERSION, plural) == 200
        # The finalizer goes on by a metadata patch carrying the resourceVersion (CL-001, PO-001).
        patched = co.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            plural,
            name,
            {
                "metadata": {
                    "finalizers": [finalizer],
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                }
            },
        )
        assert patched["metadata"]["finalizers"] == [finalizer]
        written = co.patch_namespaced_custom_object_status(
            names.GROUP, names.VERSION, namespace, plural, name, {"status": status}
        )
        assert written["status"].items() >= status.items()
        # And off again, last, as the controllers do (CL-020, PO-044).
        cleared = co.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            plural,
            name,
            {"metadata": {"finalizers": None}},
        )
        assert not cleared["metadata"].get("finalizers")
        for verb in ("update", "patch"):
            assert can(operator, verb, plural, group=names.GROUP, namespace=namespace)
            for sub in ("status", "finalizers"):
                assert can(
                    operator,
                    verb,
                    plural,
                    group=names.GROUP,
                    namespace=namespace,
                    subresource=sub,
                ), f"{verb} {plural}/{sub}"


def test_operator_reads_nodes_and_records_events(
    operator: k8s.ApiClient,
    kube_admin: k8s.ApiClient,
    namespace: str,
    pool_and_claim: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    node = f"host-{uuid.uuid4().hex[:8]}"
    k8s.CoreV1Api(kube_admin).create_node(
        {"metadata": {"name": node, "labels": {names.HOST_LABEL: names.HOST_LABEL_VALUE}}}
    )
    core = k8s.CoreV1Api(operator)
    assert core.read_node(node).metadata.name == node
    hosts = core.list_node(label_selector=f"{names.HOST_LABEL}={names.HOST_LABEL_VALUE}")
    assert node in [n.metadata.name for n in hosts.items]
    assert watch_opens(core.list_node) == 200
    forbidden(lambda: core.patch_node(node, {"spec": {"unschedulable": True}}))

    claim = pool_and_claim[1]
    events = k8s.EventsV1Api(operator)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    event = events.create_namespaced_event(
        namespace,
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"c.{uuid.uuid4().hex[:8]}"},
            "eventTime": now,
            "reportingController": f"{names.GROUP}/operator",
            "reportingInstance": "test",
            "action": "Bind",
            "reason": "Bound",
            "type": "Normal",
            "note": "bound",
            "regarding": {
                "apiVersion": names.API_VERSION,
                "kind": names.CLAIM_KIND,
                "namespace": namespace,
                "name": claim["metadata"]["name"],
                "uid": claim["metadata"]["uid"],
            },
        },
    )
    again = events.patch_namespaced_event(
        event.metadata.name, namespace, {"series": {"count": 2, "lastObservedTime": now}}
    )
    assert again.series.count == 2


@pytest.mark.req("DP-004")
def test_operator_reads_and_patches_its_battery_config_map_only(
    operator: k8s.ApiClient, kube_admin: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(operator)
    cm = core.read_namespaced_config_map(names.BATTERY_CONFIG_MAP, NS)
    assert "_no-hosts" in cm.data["config.json"]
    patched = core.patch_namespaced_config_map(
        names.BATTERY_CONFIG_MAP,
        NS,
        {"metadata": {"annotations": {names.RESTART_PENDING_ANNOTATION: "true"}}},
    )
    assert patched.metadata.annotations[names.RESTART_PENDING_ANNOTATION] == "true"
    by_name = f"metadata.name={names.BATTERY_CONFIG_MAP}"
    assert [
        c.metadata.name for c in core.list_namespaced_config_map(NS, field_selector=by_name).items
    ] == [names.BATTERY_CONFIG_MAP]
    assert watch_opens(core.list_namespaced_config_map, NS, field_selector=by_name) == 200

    other = f"other-{uuid.uuid4().hex[:8]}"
    k8s.CoreV1Api(kube_admin).create_namespaced_config_map(NS, {"metadata": {"name": other}})
    forbidden(lambda: core.read_namespaced_config_map(other, NS))
    forbidden(lambda: core.list_namespaced_config_map(NS))
    forbidden(lambda: core.create_namespaced_config_map(NS, {"metadata": {"name": "x"}}))
    forbidden(lambda: core.delete_namespaced_config_map(names.BATTERY_CONFIG_MAP, NS))


# --- what it may not ------------------------------------------------------------------------


@pytest.mark.req("DP-021")
def test_operator_reads_no_secrets(
    operator: k8s.ApiClient, kube_admin: k8s.ApiClient, namespace: str
) -> None:
    admin_core = k8s.CoreV1Api(kube_admin)
    admin_core.create_namespaced_secret(namespace, {"metadata": {"name": "elsewhere"}})
    mine = f"own-{uuid.uuid4().hex[:8]}"
    admin_core.create_namespaced_secret(NS, {"metadata": {"name": mine}})
    core = k8s.CoreV1Api(operator)
    forbidden(lambda: core.read_namespaced_secret("elsewhere", namespace))
    forbidden(lambda: core.list_namespaced_secret(namespace))
    forbidden(lambda: core.list_secret_for_all_namespaces())
    # OPERATOR_SECRETS is empty: not even its own namespace's Secrets.
    assert rbac.OPERATOR_SECRETS == ()
    forbidden(lambda: core.read_namespaced_secret(mine, NS))
    forbidden(lambda: core.list_namespaced_secret(NS))
    assert not can(operator, "watch", "secrets")
    assert not can(operator, "get", "secrets", namespace=namespace, name="elsewhere")


@pytest.mark.req("DP-020")
def test_operator_never_creates_or_deletes_pools_or_claims(
    operator: k8s.ApiClient, namespace: str, pool_and_claim: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    co = k8s.CustomObjectsApi(operator)
    forbidden(
        lambda: co.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.POOL_PLURAL,
            samples.sample_pool(name="p2", namespace=namespace),
        )
    )
    forbidden(
        lambda: co.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            samples.sample_claim(name="c2", namespace=namespace),
        )
    )
    forbidden(
        lambda: co.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.POOL_PLURAL, "p"
        )
    )
    forbidden(
        lambda: co.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, "c"
        )
    )


def test_operator_cannot_delete_namespaces_touch_pods_or_escalate(
    operator: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(operator)
    forbidden(lambda: core.delete_namespace(namespace))
    forbidden(lambda: core.list_namespaced_pod(NS))
    forbidden(
        lambda: core.create_namespaced_service_account_token(SA, NS, {"spec": {"audiences": []}})
    )
    rbac_api = k8s.RbacAuthorizationV1Api(operator)
    forbidden(
        lambda: rbac_api.create_cluster_role_binding(
            {
                "metadata": {"name": f"escalate-{uuid.uuid4().hex[:8]}"},
                "roleRef": {
                    "apiGroup": rbac.RBAC_GROUP,
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}],
            }
        )
    )
    forbidden(
        lambda: rbac_api.create_namespaced_role(
            NS,
            {
                "metadata": {"name": "more"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
            },
        )
    )
    forbidden(lambda: rbac_api.patch_cluster_role(rbac.MANAGER_ROLE, {"rules": []}))
    for verb, resource in (
        ("escalate", "clusterroles"),
        ("bind", "clusterroles"),
        ("impersonate", "users"),
        ("impersonate", "serviceaccounts"),
    ):
        group = "" if resource in ("users", "serviceaccounts") else rbac.RBAC_GROUP
        assert not can(operator, verb, resource, group=group), f"{verb} {resource}"
    assert not can(operator, "create", "leases", group="coordination.k8s.io", namespace=NS)
    assert not can(operator, "create", "pods", subresource="exec", namespace=NS)


# --- users (DP-020) --------------------------------------------------------------------------


def test_the_built_in_roles_aggregate_ours(
    admin: k8s.ApiClient, installed: list[dict[str, Any]]
) -> None:
    roles = {
        r["metadata"]["name"]: r
        for r in k8s.ApiClient.sanitize_for_serialization(
            admin, k8s.RbacAuthorizationV1Api(admin).list_cluster_role().items
        )
    }
    edit = aggregated_rules(roles, "edit")
    view = aggregated_rules(roles, "view")
    admin_rules = aggregated_rules(roles, "admin")
    for rule in rbac.claim_editor_rules():
        assert rules_key(rule) in {rules_key(r) for r in edit}
        assert rules_key(rule) in {rules_key(r) for r in admin_rules}
        assert rules_key(rule) not in {rules_key(r) for r in view}
    for rule in rbac.viewer_rules():
        for built_in in (view, edit, admin_rules):
            assert rules_key(rule) in {rules_key(r) for r in built_in}


@pytest.mark.req("DP-020")
@pytest.mark.parametrize("role", [rbac.CLAIM_EDITOR_ROLE, "edit"])
def test_a_claim_editor_creates_claims_but_never_writes_status(
    role: str,
    controlplane: ControlPlane,
    kube_admin: k8s.ApiClient,
    namespace: str,
    installed: list[dict[str, Any]],
) -> None:
    rbac_admin = k8s.RbacAuthorizationV1Api(kube_admin)
    role_ref = role
    if role == "edit":
        # `edit` as kube-controller-manager aggregates it (this control plane runs none).
        roles = {
            r["metadata"]["name"]: r
            for r in kube_admin.sanitize_for_serialization(rbac_admin.list_cluster_role().items)
        }
        role_ref = f"aggregated-edit-{namespace}"
        rbac_admin.create_cluster_role(
            {"metadata": {"name": role_ref}, "rules": aggregated_rules(roles, "edit")}
        )
    user = f"dev-{uuid.uuid4().hex[:8]}"
    rbac_admin.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "ClusterRole", "name": role_ref},
            "subjects": [{"apiGroup": rbac.RBAC_GROUP, "kind": "User", "name": user}],
        },
    )
    api = user_client(controlplane, user, ["developers"])
    try:
        co = k8s.CustomObjectsApi(api)
        made = co.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            samples.sample_claim(name="mine", namespace=namespace),
        )
        assert made["metadata"]["uid"]
        renewed = co.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            "mine",
            {"spec": {"renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}},
        )
        assert renewed["spec"]["renewTime"]
        forbidden(
            lambda: co.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                names.CLAIM_PLURAL,
                "mine",
                {"status": {"phase": "Bound"}},
            )
        )
        forbidden(
            lambda: co.replace_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                names.CLAIM_PLURAL,
                "mine",
                {**renewed, "status": {"phase": "Bound"}},
            )
        )
        assert not can(
            api,
            "update",
            names.POOL_PLURAL,
            group=names.GROUP,
            namespace=namespace,
            subresource="status",
        )
        co.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, "mine"
        )
    finally:
        api.close()


@pytest.mark.req("DP-020", "DP-021")
def test_only_the_operator_identity_is_granted_status_and_none_secrets_elsewhere() -> None:
    """Across install.yaml: status writes only through roles bound to the Operator alone."""
    objs = render.render(operator_image=OPERATOR_IMAGE)
    roles = {
        (o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("ClusterRole", "Role")
    }
    bound: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objs:
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            bound.setdefault((o["roleRef"]["kind"], o["roleRef"]["name"]), []).extend(o["subjects"])
    operator_subject = {"kind": "ServiceAccount", "name": SA, "namespace": NS}
    status_writers = []
    for key, role in roles.items():
        for rule in role["rules"]:
            ours = names.GROUP in rule["apiGroups"] or "*" in rule["apiGroups"]
            if (
                ours
                and any(r.endswith("/status") or r == "*" for r in rule["resources"])
                and rbac.WRITE_VERBS & set(rule["verbs"])
            ):  # DP-020: Pools' and claims' status (the approver writes CSRs' status)
                status_writers.append(key)
            if "secrets" in rule["resources"] or "*" in rule["resources"]:
                assert key[0] == "Role" and rule.get("resourceNames"), f"{key} grants Secrets"
    assert status_writers == [("ClusterRole", rbac.MANAGER_ROLE)]
    assert bound[("ClusterRole", rbac.MANAGER_ROLE)] == [operator_subject]
    # The user roles are bound by nobody here: only aggregation reaches them.
    assert ("ClusterRole", rbac.CLAIM_EDITOR_ROLE) not in bound
    assert ("ClusterRole", rbac.VIEWER_ROLE) not in bound


# --- the CSR approver's identity -------------------------------------------------------------


@pytest.fixture(scope="module")
def approver(
    controlplane: ControlPlane, installed: list[dict[str, Any]]
) -> Iterator[k8s.ApiClient]:
    """A client with a real token for the approver's ServiceAccount install.yaml made."""
    api = service_account_client(controlplane, NS, names.CSR_APPROVER_NAME, create=False)
    try:
        yield api
    finally:
        api.close()


def _secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "type": "Opaque", "data": {}}


def _create_if_missing(create: Callable[[], Any]) -> None:
    """Create an object another test may have made already (409 is fine, nothing else)."""
    try:
        create()
    except k8s.ApiException as e:
        if e.status != 409:
            raise


@pytest.mark.req("CT-022", "CT-106", "CT-102", "DP-021")
def test_the_approver_reads_requests_nodes_and_its_three_ca_secrets_only(
    approver: k8s.ApiClient, kube_admin: k8s.ApiClient, namespace: str
) -> None:
    admin_core = k8s.CoreV1Api(kube_admin)
    for name in (
        names.SERVING_CA_SECRET,
        names.CLIENT_CA_SECRET,
        names.EXEC_AGENT_SERVING_CA_SECRET,
    ):
        _create_if_missing(partial(admin_core.create_namespaced_secret, NS, _secret(name)))
    other = f"other-{uuid.uuid4().hex[:8]}"
    admin_core.create_namespaced_secret(NS, _secret(other))
    admin_core.create_namespaced_secret(namespace, _secret("elsewhere"))
    node = f"host-{uuid.uuid4().hex[:8]}"
    admin_core.create_node({"metadata": {"name": node}})

    core = k8s.CoreV1Api(approver)
    certs = k8s.CertificatesV1Api(approver)
    # What it needs works: requests listed and watched, a Node read, its CA Secrets read.
    certs.list_certificate_signing_request()
    assert watch_opens(certs.list_certificate_signing_request) == 200
    assert core.read_node(node).metadata.name == node
    for name in (
        names.SERVING_CA_SECRET,
        names.CLIENT_CA_SECRET,
        names.EXEC_AGENT_SERVING_CA_SECRET,
    ):
        assert core.read_namespaced_secret(name, NS).metadata.name == name
        by_name = f"metadata.name={name}"
        assert watch_opens(core.list_namespaced_secret, NS, field_selector=by_name) == 200
    for verb in ("approve", "sign"):
        for signer in names.SIGNERS:
            # CT-102: it approves (and denies) for the three, signs only the serving two.
            allowed = verb == "approve" or signer != names.FLINTLOCKD_CLIENT_SIGNER
            assert (
                can(approver, verb, "signers", group="certificates.k8s.io", name=signer) == allowed
            ), f"{verb} {signer}"
        assert not can(
            approver,
            verb,
            "signers",
            group="certificates.k8s.io",
            name="kubernetes.io/kube-apiserver-client",
        )
    # What it must not: any other Secret, here or elsewhere; any write to a Node.
    forbidden(lambda: core.read_namespaced_secret(other, NS))
    forbidden(lambda: core.list_namespaced_secret(NS))
    forbidden(lambda: core.read_namespaced_secret("elsewhere", namespace))
    forbidden(lambda: core.list_secret_for_all_namespaces())
    forbidden(lambda: core.patch_node(node, {"metadata": {"annotations": {"x": "y"}}}))
    forbidden(lambda: core.patch_node(node, {"spec": {"unschedulable": True}}))
    forbidden(lambda: core.delete_node(node))
    forbidden(lambda: core.list_node())
    forbidden(lambda: certs.delete_certificate_signing_request("anything"))


def test_the_approver_writes_its_two_config_maps_and_no_other(
    approver: k8s.ApiClient, kube_admin: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(approver)
    for name in (names.CA_BUNDLE_CONFIG_MAP, names.ADDRESS_PINS_CONFIG_MAP):
        _create_if_missing(
            partial(core.create_namespaced_config_map, NS, {"metadata": {"name": name}})
        )
        patched = core.patch_namespaced_config_map(name, NS, {"data": {"k": "v"}})
        assert patched.data["k"] == "v"
    forbidden(lambda: core.read_namespaced_config_map(names.BATTERY_CONFIG_MAP, NS))
    forbidden(lambda: core.patch_namespaced_config_map(names.BATTERY_CONFIG_MAP, NS, {"data": {}}))
    forbidden(lambda: core.delete_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS))


def _service_accounts() -> list[str]:
    """Every ServiceAccount install.yaml creates."""
    objs = render.render(operator_image=OPERATOR_IMAGE)
    return [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]


@pytest.mark.req("CT-022", "CT-106", "DP-021")
@pytest.mark.parametrize("account", _service_accounts())
def test_of_the_identities_only_the_approver_reads_the_ca_secrets_and_none_batterys(
    controlplane: ControlPlane,
    kube_admin: k8s.ApiClient,
    installed: list[dict[str, Any]],
    account: str,
) -> None:
    """Acting as each ServiceAccount of install.yaml with a real token: the CA Secrets are
    readable by the CSR approver only; battery's client Secret by none (the kubelet mounts it)."""
    admin_core = k8s.CoreV1Api(kube_admin)
    ca_secrets = (
        names.SERVING_CA_SECRET,
        names.CLIENT_CA_SECRET,
        names.EXEC_AGENT_SERVING_CA_SECRET,
    )
    for name in (*ca_secrets, names.BATTERY_CLIENT_SECRET):
        _create_if_missing(partial(admin_core.create_namespaced_secret, NS, _secret(name)))
    api = service_account_client(controlplane, NS, account, create=False)
    try:
        core = k8s.CoreV1Api(api)
        for name in ca_secrets:
            if account == names.CSR_APPROVER_NAME:
                assert core.read_namespaced_secret(name, NS).metadata.name == name
            else:
                forbidden(partial(core.read_namespaced_secret, name, NS))
                assert not can(api, "watch", "secrets", namespace=NS, name=name)
        forbidden(partial(core.read_namespaced_secret, names.BATTERY_CLIENT_SECRET, NS))
        forbidden(partial(core.list_namespaced_secret, NS))
    finally:
        api.close()
    assert names.CSR_APPROVER_NAME in _service_accounts()


def _secret_volumes(pod: dict[str, Any]) -> dict[str, set[str]]:
    """Volume name -> the Secrets it mounts (directly or projected)."""
    out: dict[str, set[str]] = {}
    for volume in pod.get("volumes", []):
        found = set()
        if "secret" in volume:
            found.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                found.add(source["secret"]["name"])
        if found:
            out[volume["name"]] = found
    return out


@pytest.mark.req("CT-022", "DP-005")
def test_no_pod_mounts_a_ca_secret_and_only_battery_and_its_registry_mount_its_client_secret() -> (
    None
):
    """A Pod reads a Secret through its volumes without any RBAC: no Pod of install.yaml mounts
    a CA Secret, and battery's client Secret is mounted only in the Operator Pod, read-only, by
    battery and by the host registry (which watches it for renewals, DP-007)."""
    mounted_by: dict[str, set[str]] = {}
    for obj in render.render(operator_image=OPERATOR_IMAGE):
        pod = obj.get("spec", {}).get("template", {}).get("spec")
        if pod is None:
            continue
        volumes = _secret_volumes(pod)
        for container in pod["containers"] + pod.get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                for secret in volumes.get(mount["name"], ()):
                    assert mount.get("readOnly") is True, (container["name"], mount["name"])
                    mounted_by.setdefault(secret, set()).add(
                        f"{obj['metadata']['name']}/{container['name']}"
                    )
    assert names.SERVING_CA_SECRET not in mounted_by
    assert names.CLIENT_CA_SECRET not in mounted_by
    assert mounted_by == {
        names.BATTERY_CLIENT_SECRET: {
            f"{names.OPERATOR_DEPLOYMENT}/{render.BATTERY_CONTAINER}",
            f"{names.OPERATOR_DEPLOYMENT}/{render.HOST_REGISTRY_CONTAINER}",
        }
    }


def test_the_approver_pod_meets_the_restricted_pod_security_standard(
    kube_admin: k8s.ApiClient, namespace: str, installed: list[dict[str, Any]]
) -> None:
    core = k8s.CoreV1Api(kube_admin)
    core.patch_namespace(
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    core.create_namespaced_service_account(
        namespace, {"metadata": {"name": names.CSR_APPROVER_NAME}}
    )
    deployment = next(
        o
        for o in render.render(operator_image=OPERATOR_IMAGE)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == names.CSR_APPROVER_NAME
    )
    spec = deployment["spec"]["template"]["spec"]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "approver"}, "spec": spec}
    core.create_namespaced_pod(namespace, body, dry_run="All")


def test_the_approver_deployment_runs_its_pex_with_a_trust_domain() -> None:
    objs = render.render(operator_image=OPERATOR_IMAGE)
    deployment = next(
        o
        for o in objs
        if o["kind"] == "Deployment" and o["metadata"]["name"] == names.CSR_APPROVER_NAME
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == names.CSR_APPROVER_NAME
    (container,) = pod["containers"]
    assert "command" not in container, "the image's entrypoint runs the pex"
    assert f"--trust-domain={names.DEFAULT_TRUST_DOMAIN}" in container["args"]
    assert container["image"] == "registry.example/battery-operator/csr-approver:v0.0.0-test"
