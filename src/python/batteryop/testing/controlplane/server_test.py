"""The real control plane behaves as the operator's tests rely on (issue: foundation)."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client as k8s
from kubernetes import watch

from batteryop.testing.controlplane import (
    ControlPlane,
    await_access,
    install_crd,
    request_token,
    user_client,
)
from batteryop.tls import cert_pem, make_csr, new_key

GROUP = "example.batteryop.test"

pytestmark = pytest.mark.controlplane


def widget_crd() -> dict[str, Any]:
    """A CRD with an OpenAPI rule and a CEL rule, so both server-side validators run."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1},
                                        "max": {"type": "integer"},
                                    },
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "!has(self.max) || self.max >= self.size",
                                            "message": "max must be at least size",
                                            "fieldPath": ".max",
                                        }
                                    ],
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def widget(name: str, **spec: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_start_is_fast_when_binaries_are_built(controlplane: ControlPlane) -> None:
    print(f"control plane warm start: {controlplane.started_in:.2f}s")
    assert controlplane.running


def test_crd_rejects_invalid_objects_with_the_servers_message(
    kube_admin: k8s.ApiClient, namespace: str
) -> None:
    install_crd(kube_admin, widget_crd())
    custom = k8s.CustomObjectsApi(kube_admin)
    custom.create_namespaced_custom_object(
        GROUP, "v1", namespace, "widgets", widget("ok", size=2, max=3)
    )

    with pytest.raises(k8s.ApiException) as cel:
        custom.create_namespaced_custom_object(
            GROUP, "v1", namespace, "widgets", widget("bad-cel", size=5, max=3)
        )
    assert cel.value.status == 422
    assert "spec.max: Invalid value" in cel.value.body
    assert "max must be at least size" in cel.value.body

    with pytest.raises(k8s.ApiException) as openapi:
        custom.create_namespaced_custom_object(
            GROUP, "v1", namespace, "widgets", widget("bad-min", size=0)
        )
    assert openapi.value.status == 422
    assert (
        "spec.size" in openapi.value.body
        and "should be greater than or equal to 1" in openapi.value.body
    )


def test_a_watch_sees_a_change(kube_admin: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube_admin)
    name = "watched"
    core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"v": "1"})
    )
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []

    def watch_it() -> None:
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=20
        ):
            seen.append((ev["type"], ev["object"].data["v"]))
            w.stop()

    t = threading.Thread(target=watch_it)
    t.start()
    core.patch_namespaced_config_map(name, namespace, {"data": {"v": "2"}})
    t.join(timeout=25)
    assert seen == [("MODIFIED", "2")]


@pytest.mark.req("TD-100")
def test_token_request_passes_token_review_only_for_its_audience(
    kube_admin: k8s.ApiClient, namespace: str, sa_client: Callable[[str, str], k8s.ApiClient]
) -> None:
    sa_client(namespace, "agent")  # creates the ServiceAccount
    token = request_token(kube_admin, namespace, "agent", audiences=["battery-exec"], seconds=600)
    auth = k8s.AuthenticationV1Api(kube_admin)

    def review(audience: str) -> Any:
        return auth.create_token_review(
            k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience]))
        ).status

    ok = review("battery-exec")
    assert ok.authenticated is True
    assert ok.user.username == f"system:serviceaccount:{namespace}:agent"
    assert ok.audiences == ["battery-exec"]
    other = review("someone-else")
    assert not other.authenticated
    assert "audience" in (other.error or "").lower()


@pytest.mark.req("TD-100")
def test_csr_is_created_approved_and_given_a_certificate(
    controlplane: ControlPlane, kube_admin: k8s.ApiClient
) -> None:
    certs = k8s.CertificatesV1Api(kube_admin)
    name = f"csr-{uuid.uuid4().hex[:8]}"
    pem = make_csr(new_key(), "system:node:host-1", organizations=["system:nodes"])
    certs.create_certificate_signing_request(
        k8s.V1CertificateSigningRequest(
            metadata=k8s.V1ObjectMeta(name=name),
            spec=k8s.V1CertificateSigningRequestSpec(
                request=base64.b64encode(pem).decode(),
                signer_name="example.batteryop.test/exec-agent",
                usages=["digital signature", "client auth"],
            ),
        )
    )
    csr = certs.read_certificate_signing_request(name)
    csr.status = k8s.V1CertificateSigningRequestStatus(
        conditions=[
            k8s.V1CertificateSigningRequestCondition(
                type="Approved",
                status="True",
                reason="TestApproved",
                message="approved by the test",
            )
        ]
    )
    certs.replace_certificate_signing_request_approval(name, csr)
    # A signer writes status.certificate; here the test is the signer.
    issued = controlplane.ca.sign_csr(x509.load_pem_x509_csr(pem), client=True)
    body = certs.read_certificate_signing_request(name)
    body.status.certificate = base64.b64encode(cert_pem(issued)).decode()
    certs.replace_certificate_signing_request_status(name, body)

    final = certs.read_certificate_signing_request(name)
    assert [c.type for c in final.status.conditions] == ["Approved"]
    got = x509.load_pem_x509_certificate(base64.b64decode(final.status.certificate))
    assert got.subject.rfc4514_string() == "CN=system:node:host-1,O=system:nodes"


def test_rbac_forbids_what_a_role_does_not_grant(
    controlplane: ControlPlane,
    kube_admin: k8s.ApiClient,
    namespace: str,
    sa_client: Callable[[str, str], k8s.ApiClient],
) -> None:
    rbac = k8s.RbacAuthorizationV1Api(kube_admin)
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name="cm-reader"),
            rules=[
                k8s.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name="cm-reader"),
            role_ref=k8s.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="cm-reader"
            ),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    reader = f"system:serviceaccount:{namespace}:reader"
    await_access(
        kube_admin, user=reader, groups=[], namespace=namespace, verb="list", resource="configmaps"
    )
    core = k8s.CoreV1Api(sa_client(namespace, "reader"))
    assert core.list_namespaced_config_map(namespace).items is not None  # granted
    with pytest.raises(k8s.ApiException) as secrets:
        core.list_namespaced_secret(namespace)
    assert secrets.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in secrets.value.body
    with pytest.raises(k8s.ApiException) as write:
        core.create_namespaced_config_map(
            namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="x"))
        )
    assert write.value.status == 403
    # A user outside system:masters is bound by RBAC too.
    with pytest.raises(k8s.ApiException) as user:
        k8s.CoreV1Api(user_client(controlplane, "mallory")).list_namespace()
    assert user.value.status == 403


def test_kubectl_reaches_the_control_plane(controlplane: ControlPlane) -> None:
    with controlplane.kubectl_env() as env:
        out = subprocess.run(
            ["kubectl", "get", "--raw", "/readyz"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_stop_kills_every_process_and_removes_every_file() -> None:
    cp = ControlPlane.start()
    pids = [p.popen.pid for p in cp._procs]
    workdir = cp.workdir
    started = time.monotonic()
    cp.stop()
    assert not workdir.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert time.monotonic() - started < 15


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A loopback port a listener holds for the block."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def test_a_port_taken_between_choosing_and_binding_starts_again_on_other_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The race, made certain: the first port etcd is given is already held by a listener.
    from batteryop.testing.controlplane import server

    real = server.free_port
    with held_port() as port:
        given = [port]
        monkeypatch.setattr(
            server, "free_port", lambda host="127.0.0.1": given.pop() if given else real(host)
        )
        cp = ControlPlane.start()
        try:
            assert cp.running
            status, _ = cp._get("/readyz", cp.ssl_context())
            assert status == 200
            assert not given, "the taken port was handed out"
        finally:
            cp.stop()


def test_a_port_taken_on_every_attempt_fails_with_the_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from batteryop.testing.controlplane import server

    with held_port() as port:
        monkeypatch.setattr(server, "free_port", lambda host="127.0.0.1": port)
        with pytest.raises(server.ControlPlaneError, match="address already in use"):
            ControlPlane.start()


@pytest.mark.req("TD-100")
def test_validating_admission_policy_is_enforced(kube_admin: k8s.ApiClient, namespace: str) -> None:
    """ValidatingAdmissionPolicy is on: a CEL policy bound to a namespace denies with its message."""
    name = f"deny-forbidden-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.data) || !('forbidden' in object.data)",
                    "message": "configmaps may not carry a 'forbidden' key",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    custom = k8s.CustomObjectsApi(kube_admin)
    for plural, body in (
        ("validatingadmissionpolicies", policy),
        ("validatingadmissionpolicybindings", binding),
    ):
        custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", plural, body)
    core = k8s.CoreV1Api(kube_admin)
    bad = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="bad"), data={"forbidden": "x"})
    # The policy reaches the admission plugin through an informer: the first creates after
    # the binding may still pass, so retry on a bounded schedule until it denies.
    deadline = time.monotonic() + 30
    denied: k8s.ApiException | None = None
    attempt = 0
    while time.monotonic() < deadline and denied is None:
        attempt += 1
        bad.metadata.name = f"bad-{attempt}"
        try:
            core.create_namespaced_config_map(namespace, bad)
        except k8s.ApiException as e:
            denied = e
        else:
            time.sleep(0.2)
    assert denied is not None, "the ValidatingAdmissionPolicy never denied a forbidden ConfigMap"
    assert denied.status == 422
    assert "configmaps may not carry a 'forbidden' key" in denied.body
    assert f"ValidatingAdmissionPolicy '{name}'" in denied.body
    core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="good"), data={"ok": "1"})
    )
