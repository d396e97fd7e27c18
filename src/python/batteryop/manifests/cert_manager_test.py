"""install.yaml's cert-manager objects, judged by cert-manager's own CRDs in the real API server.

cert-manager's CRDs come from the release pinned in 3rdparty/go/certmanager
(`batteryop.testing.certmanager`). install.yaml's Issuers and Certificates, rendered for a
fresh namespace, are sent with a server-side dry run (`dryRun=All`, strict field validation),
then created for real. A misspelled field, a value outside an enum and a missing required
field are refused by the same schemas: the dry run is not a rubber stamp. No cert-manager
controller runs (its controller module is not served by the Go module proxy), so nothing is
issued: the values cert-manager would issue from are asserted as stored.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.manifests import cert_manager, render
from batteryop.testing import certmanager
from batteryop.testing.controlplane import admin_client
from batteryop.testing.controlplane.server import ControlPlane

OPERATOR_IMAGE = "registry.example/battery-operator:v0.0.0-test"
PLURALS = {"Issuer": "issuers", "Certificate": "certificates"}
EXPECTED = [
    ("Issuer", names.SELFSIGNED_ISSUER),
    ("Certificate", names.SERVING_CA_SECRET),
    ("Certificate", names.CLIENT_CA_SECRET),
    ("Certificate", names.EXEC_AGENT_SERVING_CA_SECRET),
    ("Issuer", names.CLIENT_CA_ISSUER),
    ("Certificate", names.BATTERY_CLIENT_SECRET),
]


def cert_manager_objects(namespace: str = names.OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """install.yaml's cert-manager objects, in its order, rendered for `namespace`."""
    objs = render.render(operator_image=OPERATOR_IMAGE, namespace=namespace)
    return [o for o in objs if o["apiVersion"].split("/")[0] == cert_manager.GROUP]


def by_name(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def flag(args: list[str], name: str) -> str:
    (value,) = (a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))
    return value


# --- without an API server -------------------------------------------------------------------


def test_install_yaml_holds_the_issuers_and_certificates_after_its_namespace() -> None:
    objs = render.render(operator_image=OPERATOR_IMAGE)
    ours = cert_manager_objects()
    assert [(o["kind"], o["metadata"]["name"]) for o in ours] == EXPECTED
    assert objs[0]["kind"] == "Namespace"
    assert all(o["metadata"]["namespace"] == names.OPERATOR_NAMESPACE for o in ours)
    assert all(o["apiVersion"] == "cert-manager.io/v1" for o in ours)
    assert render.snapshot_text().count("apiVersion: cert-manager.io/v1\n") == len(EXPECTED)


def test_every_issuer_reference_names_an_issuer_created_before_it() -> None:
    """cert-manager's CRD takes any `issuerRef.kind` (its webhook, not its schema, checks it),
    so this check is ours: each reference is to an Issuer of install.yaml, made earlier."""
    seen: set[str] = set()
    for obj in cert_manager_objects():
        if obj["kind"] == "Issuer":
            seen.add(obj["metadata"]["name"])
            continue
        ref = obj["spec"]["issuerRef"]
        assert ref == {"name": ref["name"], "kind": "Issuer", "group": "cert-manager.io"}
        assert ref["name"] in seen, f"{obj['metadata']['name']} names {ref['name']} before it"


@pytest.mark.req("CT-021", "CT-106")
def test_the_cas_are_self_signed_ecdsa_ten_year_cas_whose_key_is_kept() -> None:
    objs = by_name(cert_manager_objects())
    assert objs["Issuer", names.SELFSIGNED_ISSUER]["spec"] == {"selfSigned": {}}
    for name in (
        names.SERVING_CA_SECRET,
        names.CLIENT_CA_SECRET,
        names.EXEC_AGENT_SERVING_CA_SECRET,
    ):
        assert objs["Certificate", name]["spec"] == {
            "isCA": True,
            "commonName": name,
            "secretName": name,
            "duration": "87600h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"},
            "issuerRef": {"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"},
        }
    # The Secrets the CSR approver reads are the ones these Certificates fill.
    assert names.SERVING_CA_SECRET == "flintlockd-serving-ca"
    assert names.CLIENT_CA_SECRET == "flintlockd-client-ca"
    assert names.EXEC_AGENT_SERVING_CA_SECRET == "exec-agent-serving-ca"


@pytest.mark.req("CT-023")
def test_batterys_client_certificate_has_one_spiffe_uri_from_the_client_ca() -> None:
    objs = by_name(cert_manager_objects())
    issuer = objs["Issuer", names.CLIENT_CA_ISSUER]
    assert issuer["spec"] == {"ca": {"secretName": "flintlockd-client-ca"}}
    spec = objs["Certificate", names.BATTERY_CLIENT_SECRET]["spec"]
    assert spec == {
        "secretName": "battery-flintlockd-client",
        "uris": ["spiffe://battery.liquidmetal-x.dev/flintlock/client/battery"],
        "duration": "2160h",
        "renewBefore": "720h",
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        "usages": ["digital signature", "key encipherment", "client auth"],
        "issuerRef": {"name": "flintlockd-client-ca", "kind": "Issuer", "group": "cert-manager.io"},
    }
    # Its only SAN: no common name, DNS name, address, e-mail or other name beside the URI.
    other_sans = {"commonName", "dnsNames", "ipAddresses", "emailAddresses", "otherNames"}
    assert not other_sans & set(spec)


@pytest.mark.req("CT-023")
def test_the_client_certificates_trust_domain_is_the_one_the_deployables_are_given() -> None:
    objs = render.render(operator_image=OPERATOR_IMAGE)
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objs
        if o["kind"] in ("Deployment", "DaemonSet")
    }
    domains = {
        flag(pods[names.CSR_APPROVER_NAME]["containers"][0]["args"], "trust-domain"),
        flag(pods[names.EXEC_AGENT_NAME]["containers"][0]["args"], "trust-domain"),
    }
    (domain,) = domains
    (uri,) = by_name(cert_manager_objects())["Certificate", names.BATTERY_CLIENT_SECRET]["spec"][
        "uris"
    ]
    assert uri == names.spiffe_battery_client_id(domain)
    other = cert_manager.battery_client_certificate("ns", {}, trust_domain="example.org")
    assert other["spec"]["uris"] == ["spiffe://example.org/flintlock/client/battery"]


# --- against the real API server with cert-manager's CRDs -------------------------------------


@pytest.fixture(scope="module")
def cm_admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    """An admin client, once cert-manager's CRDs are installed and Established."""
    api = admin_client(controlplane)
    try:
        installed = certmanager.install_crds(api)
        assert {"certificates.cert-manager.io", "issuers.cert-manager.io"} <= set(installed)
        yield api
    finally:
        api.close()


def create(api: k8s.ApiClient, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """POST `obj` with strict field validation, as a server-side dry run or for real."""
    kwargs: dict[str, Any] = {"field_validation": "Strict"}
    if dry_run:
        kwargs["dry_run"] = "All"
    group, version = obj["apiVersion"].split("/")
    answer: dict[str, Any] = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, obj["metadata"]["namespace"], PLURALS[obj["kind"]], obj, **kwargs
    )
    return answer


def read(api: k8s.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    group, version = obj["apiVersion"].split("/")
    answer: dict[str, Any] = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        group,
        version,
        obj["metadata"]["namespace"],
        PLURALS[obj["kind"]],
        obj["metadata"]["name"],
    )
    return answer


@pytest.mark.controlplane
@pytest.mark.req("CT-021", "CT-023")
def test_cert_managers_crds_accept_every_object_in_a_dry_run_and_for_real(
    cm_admin: k8s.ApiClient, namespace: str
) -> None:
    objs = cert_manager_objects(namespace)
    for obj in objs:
        answer = create(cm_admin, obj, dry_run=True)
        assert answer["spec"] == obj["spec"], obj["metadata"]["name"]
        with pytest.raises(k8s.ApiException) as err:  # a dry run stores nothing
            read(cm_admin, obj)
        assert err.value.status == 404
    for obj in objs:
        create(cm_admin, obj)
        stored = read(cm_admin, obj)
        assert stored["metadata"]["uid"]
        assert stored["spec"] == obj["spec"], obj["metadata"]["name"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return change


REFUSED = [
    # (kind, name, change, a word the API server's answer must contain)
    (
        "Certificate",
        names.BATTERY_CLIENT_SECRET,
        _set("spec.privateKey.rotatonPolicy", "Always"),
        "rotatonPolicy",
    ),
    (
        "Certificate",
        names.BATTERY_CLIENT_SECRET,
        _set("spec.usages", ["client-auth"]),
        "spec.usages",
    ),
    (
        "Certificate",
        names.SERVING_CA_SECRET,
        _set("spec.privateKey.algorithm", "DSA"),
        "spec.privateKey.algorithm",
    ),
    ("Certificate", names.SERVING_CA_SECRET, _set("spec.isCA", "yes"), "spec.isCA"),
    ("Certificate", names.CLIENT_CA_SECRET, _set("spec.secretName", None), "spec.secretName"),
    (
        "Certificate",
        names.BATTERY_CLIENT_SECRET,
        _set("spec.issuerRef.name", None),
        "spec.issuerRef.name",
    ),
    ("Issuer", names.CLIENT_CA_ISSUER, _set("spec.ca.secretName", None), "spec.ca.secretName"),
]


@pytest.mark.controlplane
@pytest.mark.parametrize(
    ("kind", "name", "change", "named"), REFUSED, ids=[f"{r[1]}-{r[3]}" for r in REFUSED]
)
def test_cert_managers_crds_refuse_a_wrong_field(
    cm_admin: k8s.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    named: str,
) -> None:
    """The control for the test above: the same dry run refuses what cert-manager's schema
    forbids, naming the field."""
    obj = by_name(cert_manager_objects(namespace))[kind, name]
    wrong = copy.deepcopy(obj)
    change(wrong)
    with pytest.raises(k8s.ApiException) as err:
        create(cm_admin, wrong, dry_run=True)
    assert err.value.status in (400, 422), err.value.body
    assert named in err.value.body
    create(cm_admin, obj, dry_run=True)  # the object as install.yaml has it passes
