"""Kubernetes API clients against a ControlPlane: the admin, any user, any ServiceAccount."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch

from batteryop.kube.resources import name_selector
from batteryop.testing.controlplane.server import ControlPlane

CONNECTIONS = 32
"""Connections the admin client keeps open: at least the benchmarks' 16 client threads
(`bench.workload.THREADS`). The library's default, five per CPU, is 10 here, and a burst's
creates beyond it each made a new TLS connection."""


def admin_client(cp: ControlPlane) -> k8s.ApiClient:
    """A client authenticated as a member of system:masters."""
    config = k8s.Configuration()
    k8s_config.load_kube_config_from_dict(cp.kubeconfig(), client_configuration=config)
    config.connection_pool_maxsize = CONNECTIONS
    return k8s.ApiClient(config)


def user_client(cp: ControlPlane, user: str, groups: Sequence[str] = ()) -> k8s.ApiClient:
    """A client authenticated by a client certificate for `user` in `groups`."""
    return k8s_config.new_client_from_config_dict(
        cp.kubeconfig(client=cp.client_cert(user, groups))
    )


def token_client(cp: ControlPlane, token: str) -> k8s.ApiClient:
    return k8s_config.new_client_from_config_dict(cp.kubeconfig(token=token))


def ensure_service_account(api: k8s.ApiClient, namespace: str, name: str) -> None:
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespaced_service_account(
            namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=name))
        )
    except k8s.ApiException as e:
        if e.status != 409:
            raise


def request_token(
    api: k8s.ApiClient,
    namespace: str,
    service_account: str,
    *,
    audiences: Sequence[str] = (),
    seconds: int = 3600,
    bound_secret: tuple[str, str] | None = None,
) -> str:
    """Mint a token for a ServiceAccount through the TokenRequest API.

    `bound_secret` is the (name, uid) of a Secret in `namespace` the token is bound to: the
    API server stops accepting the token once that Secret is gone.
    """
    core = k8s.CoreV1Api(api)
    bound = None
    if bound_secret is not None:
        bound = k8s.V1BoundObjectReference(
            api_version="v1", kind="Secret", name=bound_secret[0], uid=bound_secret[1]
        )
    spec = k8s.V1TokenRequestSpec(
        audiences=list(audiences), expiration_seconds=seconds, bound_object_ref=bound
    )
    resp = core.create_namespaced_service_account_token(
        service_account, namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
    )
    return str(resp.status.token)


def pod_bound_token(
    api: k8s.ApiClient, namespace: str, service_account: str, node: str, *, seconds: int = 3600
) -> str:
    """A token for a ServiceAccount bound to a new Pod on `node`, as the kubelet gets one for a
    Pod it runs: its identity names the Pod and the Node (`authentication.kubernetes.io/...`
    extras). The Pod is only an object; nothing runs it."""
    core = k8s.CoreV1Api(api)
    pod = core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(generate_name=f"{service_account}-"),
            spec=k8s.V1PodSpec(
                node_name=node,
                service_account_name=service_account,
                automount_service_account_token=False,
                containers=[k8s.V1Container(name="pause", image="registry.k8s.io/pause:3.10")],
            ),
        ),
    )
    spec = k8s.V1TokenRequestSpec(
        audiences=[],
        expiration_seconds=seconds,
        bound_object_ref=k8s.V1BoundObjectReference(
            api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
        ),
    )
    answer = core.create_namespaced_service_account_token(
        service_account, namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
    )
    return str(answer.status.token)


def service_account_client(
    cp: ControlPlane, namespace: str, name: str, *, create: bool = True
) -> k8s.ApiClient:
    """A client acting as system:serviceaccount:<namespace>:<name>, with its real RBAC."""
    admin = admin_client(cp)
    if create:
        ensure_service_account(admin, namespace, name)
    return token_client(cp, request_token(admin, namespace, name))


def install_crd(api: k8s.ApiClient, body: dict[str, Any], *, timeout_seconds: int = 30) -> None:
    """Create a CRD (an existing one of that name is left as it is) and wait until it serves.

    Established is a status condition, so this watches for it instead of polling.
    """
    ext = k8s.ApiextensionsV1Api(api)
    name = body["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(body)
    except k8s.ApiException as e:
        if e.status != 409:
            raise
    w = watch.Watch()
    for event in w.stream(
        ext.list_custom_resource_definition,
        field_selector=name_selector(name),
        timeout_seconds=timeout_seconds,
    ):
        conds = event["object"].status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            w.stop()
            return
    raise AssertionError(f"CRD {name} never became Established within {timeout_seconds}s")


def await_access(
    api: k8s.ApiClient,
    *,
    user: str,
    groups: Sequence[str],
    namespace: str,
    verb: str,
    resource: str,
    group: str = "",
    name: str = "",
    allowed: bool = True,
    timeout_seconds: float = 10.0,
) -> None:
    """Wait until the API server's authorizer answers `allowed` for `user` in `groups` to
    `verb` `resource` of API `group` ("": the core group) in `namespace`.

    The RBAC authorizer reads Roles and RoleBindings from an informer of its own, so a binding
    just written may not authorize the next request yet. Nothing streams that cache's state,
    so this asks it, through SubjectAccessReviews, with a short pause between questions.
    """
    authz = k8s.AuthorizationV1Api(api)
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=user,
            groups=list(groups),
            resource_attributes=k8s.V1ResourceAttributes(
                namespace=namespace,
                verb=verb,
                group=group,
                resource=resource,
                name=name or None,
            ),
        )
    )
    deadline = time.monotonic() + timeout_seconds
    while True:
        answer = authz.create_subject_access_review(review)
        if bool(answer.status.allowed) == allowed:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{user} was still {'refused' if allowed else 'allowed'} {verb} {resource} "
                f"{namespace}/{name} after {timeout_seconds}s"
            )
        time.sleep(0.02)
