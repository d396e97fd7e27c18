"""The approver against the real API server: real CSRs from the Exec Agent's real identity.

Every request here is created by a client holding a ServiceAccount token (see conftest.py), so
`spec.username` and the node-name extra are what the real API server records. The approver is
awaited on watches; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CollectorRegistry

from batteryop.api import names
from batteryop.api.clock import FakeClock
from batteryop.api.conditions import CSRCondition, CSRReason
from batteryop.csr_approver.metrics import ApproverMetrics
from batteryop.csr_approver.pins import Pins, read_pins
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import ForbiddenError
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS, CONFIGMAPS, NODES, SECRETS
from batteryop.testing.csr_approver_env import (
    APPROVER_CLUSTER_RULES,
    TRUST_DOMAIN,
    Cluster,
    certificate_pem,
    condition,
    decided,
    finished,
    running,
    tls_secret,
    until,
    until_csr,
)
from batteryop.testing.csrs import csr_body, ec_key, request_pem
from batteryop.tls import CertificateAuthority

pytestmark = pytest.mark.controlplane

SERVING = names.FLINTLOCKD_SERVING_SIGNER
CLIENT = names.FLINTLOCKD_CLIENT_SIGNER
AGENT_SERVING = names.EXEC_AGENT_SERVING_SIGNER


def host_id(node: str) -> str:
    return names.spiffe_host_id(TRUST_DOMAIN, node)


def agent_id(node: str) -> str:
    return names.spiffe_exec_agent_id(TRUST_DOMAIN, node)


def signed(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("certificate"))


async def pins(cluster: Cluster) -> dict[str, str]:
    """Node name to pinned address, as stored."""
    return (await stored_pins(cluster)).addresses


async def stored_pins(cluster: Cluster) -> Pins:
    return await read_pins(cluster.kube, cluster.namespace, names.ADDRESS_PINS_CONFIG_MAP)


# -- approved and signed ----------------------------------------------------------------------


@pytest.mark.req("CT-010", "CT-103", "CT-004", "CT-007", "CT-104", "CT-016")
async def test_a_flintlockd_serving_request_is_approved_pinned_and_signed(cluster: Cluster) -> None:
    node = await cluster.node("host-a", "10.20.0.1", "10.20.0.2")
    async with running(cluster), cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), ("10.20.0.2", host_id(node)), common_name="anything")
        name = await cluster.create_csr(
            agent, csr_body(cluster.name("serving"), SERVING, pem, expiration_seconds=3600)
        )
        obj = await until_csr(cluster.kube, name, finished, "finished")
    assert obj["spec"]["extra"][names.NODE_NAME_EXTRA] == [node]
    approved = condition(obj, CSRCondition.APPROVED)
    assert approved and approved["reason"] == CSRReason.EXEC_AGENT_OWN_NODE
    cert = x509.load_pem_x509_certificate(certificate_pem(obj))
    cert.verify_directly_issued_by(cluster.serving_ca.pair.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == node
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.20.0.2")]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [host_id(node)]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and not ku.key_encipherment  # an EC key (`batteryop.tls.leaf`)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    # one hour asked, backdated five minutes
    assert lifetime == datetime.timedelta(hours=1, minutes=5)
    assert await pins(cluster) == {node: "10.20.0.2"}


@pytest.mark.req("CT-014", "CT-101", "CT-103")
async def test_an_exec_agent_serving_request_is_signed_by_its_own_ca_only(cluster: Cluster) -> None:
    node = await cluster.node("host-e", "10.21.0.1")
    async with running(cluster), cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), ("10.21.0.1", agent_id(node)))
        name = await cluster.create_csr(
            agent, csr_body(cluster.name("agent-serving"), AGENT_SERVING, pem)
        )
        obj = await until_csr(cluster.kube, name, finished, "finished")
    cert = x509.load_pem_x509_certificate(certificate_pem(obj))
    cert.verify_directly_issued_by(cluster.exec_serving_ca.pair.cert)  # CT-101
    with pytest.raises((ValueError, InvalidSignature)):
        cert.verify_directly_issued_by(cluster.serving_ca.pair.cert)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    # no expirationSeconds: the configured maximum (168h), backdated five minutes
    assert lifetime == datetime.timedelta(hours=168, minutes=5)


@pytest.mark.req("CT-102", "CT-013")
async def test_a_client_request_is_denied_naming_the_rule_and_never_signed(
    cluster: Cluster,
) -> None:
    node = await cluster.node("host-c", "10.22.0.1")
    async with cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), (agent_id(node),))
        by_hand = await cluster.create_csr(agent, csr_body(cluster.name("c-hand"), CLIENT, pem))
        await cluster.set_condition(by_hand, CSRCondition.APPROVED, "ByHand")
        async with running(cluster):
            name = await cluster.create_csr(agent, csr_body(cluster.name("client"), CLIENT, pem))
            denied = await denial(cluster, name)
            failed = await until_csr(cluster.kube, by_hand, finished, "finished")
    assert denied["reason"] == CSRReason.CLIENT_SIGNED_ON_HOST
    assert str(denied["message"]).startswith("The client-signer check failed")
    fail = condition(failed, CSRCondition.FAILED)  # approved by someone else: never signed
    assert fail is not None and fail["reason"] == CSRReason.CLIENT_SIGNED_ON_HOST
    for obj in (failed, await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, name)):
        assert not signed(obj)


@pytest.mark.req("CT-005", "CT-105")
async def test_the_ca_certificates_are_published_without_keys(cluster: Cluster) -> None:
    async with running(cluster) as approver:
        # A signed request shows the CAs were loaded, and loading them publishes them.
        node = await cluster.node("host-p", "10.23.0.1")
        async with cluster.client_as(node) as agent:
            pem = request_pem(ec_key(), ("10.23.0.1", agent_id(node)))
            name = await cluster.create_csr(
                agent, csr_body(cluster.name("pub"), AGENT_SERVING, pem)
            )
            await until_csr(cluster.kube, name, signed, "signed")
        assert approver.ready
        cm = await until(
            cluster.kube,
            CONFIGMAPS,
            names.CA_BUNDLE_CONFIG_MAP,
            lambda o: len(o.get("data") or {}) == 3,
            "published the three CAs",
            namespace=cluster.namespace,
        )
    data = cm["data"]
    assert set(data) == {
        names.SERVING_CA_BUNDLE_KEY,
        names.CLIENT_CA_BUNDLE_KEY,
        names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY,
    }
    assert data[names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY].encode() == cluster.exec_serving_ca.cert_pem
    assert data[names.SERVING_CA_BUNDLE_KEY].encode() == cluster.serving_ca.cert_pem
    assert data[names.CLIENT_CA_BUNDLE_KEY].encode() == cluster.client_ca.cert_pem
    assert all("PRIVATE KEY" not in v for v in data.values())
    assert cm["metadata"]["labels"][names.MANAGED_BY_LABEL] == names.MANAGED_BY


@pytest.mark.req("CT-005", "CT-103")
async def test_an_edited_bundle_is_put_right_and_a_new_ca_is_published_and_used(
    cluster: Cluster,
) -> None:
    def bundle_is(serving: bytes) -> Callable[[dict[str, Any]], bool]:
        def check(o: dict[str, Any]) -> bool:
            data = o.get("data") or {}
            return (
                data.get(names.SERVING_CA_BUNDLE_KEY) == serving.decode()
                and data.get(names.CLIENT_CA_BUNDLE_KEY) == cluster.client_ca.cert_pem.decode()
            )

        return check

    async def bundle(serving: bytes, what: str) -> None:
        await until(
            cluster.kube,
            CONFIGMAPS,
            names.CA_BUNDLE_CONFIG_MAP,
            bundle_is(serving),
            what,
            namespace=cluster.namespace,
        )

    node = await cluster.node("host-rot", "10.39.0.1")
    async with running(cluster):
        await bundle(cluster.serving_ca.cert_pem, "published")
        await cluster.kube.patch(
            CONFIGMAPS,
            names.CA_BUNDLE_CONFIG_MAP,
            {"data": {names.SERVING_CA_BUNDLE_KEY: "tampered", "extra": "kept"}},
            cluster.namespace,
        )
        await bundle(cluster.serving_ca.cert_pem, "put right")
        rotated = CertificateAuthority.create("serving-ca-2")
        await cluster.kube.replace(
            SECRETS,
            names.SERVING_CA_SECRET,
            tls_secret(names.SERVING_CA_SECRET, rotated),
            cluster.namespace,
        )
        await bundle(rotated.cert_pem, "published the new CA")
        async with cluster.client_as(node) as agent:
            pem = request_pem(ec_key(), ("10.39.0.1", host_id(node)))
            name = await cluster.create_csr(agent, csr_body(cluster.name("rot"), SERVING, pem))
            obj = await until_csr(cluster.kube, name, signed, "signed")
    cert = x509.load_pem_x509_certificate(certificate_pem(obj))
    cert.verify_directly_issued_by(rotated.pair.cert)


# -- denied, naming the check (CT-013) -------------------------------------------------------


async def denial(cluster: Cluster, name: str) -> dict[str, object]:
    obj = await until_csr(cluster.kube, name, decided, "decided")
    denied = condition(obj, CSRCondition.DENIED)
    assert denied is not None, obj.get("status")
    assert not signed(obj)
    return denied


@pytest.mark.req("CT-013", "CT-010")
@pytest.mark.parametrize(
    ("case", "reason", "check"),
    [
        ("extra-san", CSRReason.SUBJECT_ALT_NAMES_MISMATCH, "subject-alt-names"),
        ("missing-san", CSRReason.SUBJECT_ALT_NAMES_MISMATCH, "subject-alt-names"),
        ("other-nodes-address", CSRReason.SUBJECT_ALT_NAMES_MISMATCH, "node-address"),
        ("other-nodes-id", CSRReason.SUBJECT_ALT_NAMES_MISMATCH, "subject-alt-names"),
        ("wrong-usages", CSRReason.KEY_USAGES_MISMATCH, "key-usages"),
        ("node-missing", CSRReason.NODE_NOT_FOUND, "node"),
        ("p521-key", CSRReason.INVALID_REQUEST, "request"),
        ("huge-san-list", CSRReason.INVALID_REQUEST, "request"),
    ],
)
async def test_a_failing_serving_request_is_denied_naming_the_check(
    cluster: Cluster, case: str, reason: CSRReason, check: str
) -> None:
    node = await cluster.node("host-d", "10.30.0.1")
    other = await cluster.node("host-o", "10.30.0.9")
    sans: tuple[str, ...] = ("10.30.0.1", host_id(node))
    usages = None
    if case == "extra-san":
        sans = (*sans, "host-d.example.test")
    elif case == "missing-san":
        sans = (host_id(node),)
    elif case == "other-nodes-address":
        sans = ("10.30.0.9", host_id(node))
    elif case == "other-nodes-id":
        sans = ("10.30.0.1", host_id(other))
    elif case == "wrong-usages":
        usages = ["digital signature", "key encipherment", "client auth"]
    elif case == "huge-san-list":
        sans = (*sans, *(f"10.99.{i // 250}.{i % 250}" for i in range(4000)))
    key = ec_key(ec.SECP521R1()) if case == "p521-key" else ec_key()
    async with running(cluster), cluster.client_as(node) as agent:
        if case == "node-missing":
            await cluster.kube.delete(NODES, node)
        pem = request_pem(key, sans)
        name = await cluster.create_csr(
            agent, csr_body(cluster.name(case), SERVING, pem, usages=usages)
        )
        denied = await denial(cluster, name)
    assert denied["reason"] == reason
    assert str(denied["message"]).startswith(f"The {check} check failed")
    assert other  # the other Node exists throughout
    assert await pins(cluster) == {}


@pytest.mark.req("CT-013", "CT-010", "CT-014")
@pytest.mark.parametrize("signer", [SERVING, AGENT_SERVING])
async def test_a_request_from_another_service_account_is_denied(
    cluster: Cluster, signer: str
) -> None:
    node = await cluster.node("host-r", "10.31.0.1")
    sans = ("10.31.0.1", agent_id(node) if signer == AGENT_SERVING else host_id(node))
    async with running(cluster), cluster.client_as(node, service_account="not-the-agent") as other:
        pem = request_pem(ec_key(), sans)
        name = await cluster.create_csr(other, csr_body(cluster.name("requester"), signer, pem))
        denied = await denial(cluster, name)
    assert denied["reason"] == CSRReason.REQUESTER_NOT_EXEC_AGENT


@pytest.mark.req("CT-013", "CT-014")
async def test_a_request_whose_token_is_bound_to_no_pod_names_no_node_and_is_denied(
    cluster: Cluster,
) -> None:
    async with running(cluster), cluster.client_as(None) as agent:
        pem = request_pem(ec_key(), ("10.31.9.1", agent_id("host-x")))
        name = await cluster.create_csr(
            agent, csr_body(cluster.name("no-node"), AGENT_SERVING, pem)
        )
        denied = await denial(cluster, name)
    assert denied["reason"] == CSRReason.REQUESTER_NODE_MISSING


@pytest.mark.req("CT-015", "CT-016", "CT-013")
async def test_an_address_pinned_to_another_node_is_denied_and_pins_never_change(
    cluster: Cluster,
) -> None:
    # host-b was first at 10.32.0.5; later host-a's kubelet claims the same address.
    first = await cluster.node("host-b", "10.32.0.5")
    second = await cluster.node("host-a", "10.32.0.5", "10.32.0.6")
    async with running(cluster):
        async with cluster.client_as(first) as agent_b:
            pem = request_pem(ec_key(), ("10.32.0.5", host_id(first)))
            name = await cluster.create_csr(agent_b, csr_body(cluster.name("first"), SERVING, pem))
            await until_csr(cluster.kube, name, signed, "signed")
        assert await pins(cluster) == {first: "10.32.0.5"}
        async with cluster.client_as(second) as agent_a:
            pem = request_pem(ec_key(), ("10.32.0.5", host_id(second)))
            name = await cluster.create_csr(agent_a, csr_body(cluster.name("taken"), SERVING, pem))
            denied = await denial(cluster, name)
            assert denied["reason"] == CSRReason.ADDRESS_PINNED
            # The Node's other address is free: it is pinned to host-a, and stays its pin.
            pem = request_pem(ec_key(), ("10.32.0.6", host_id(second)))
            name = await cluster.create_csr(agent_a, csr_body(cluster.name("free"), SERVING, pem))
            await until_csr(cluster.kube, name, signed, "signed")
        # host-b's Node goes away; its pin stays while its certificate is valid (CT-100).
        await cluster.kube.delete(NODES, first)
        async with cluster.client_as(second) as agent_a:
            pem = request_pem(ec_key(), ("10.32.0.6", host_id(second)))
            name = await cluster.create_csr(agent_a, csr_body(cluster.name("again"), SERVING, pem))
            await until_csr(cluster.kube, name, signed, "signed")
    assert await pins(cluster) == {first: "10.32.0.5", second: "10.32.0.6"}


# -- pins released (CT-100) -------------------------------------------------------------------


async def serving_request(cluster: Cluster, node: str, address: str, stem: str) -> dict[str, Any]:
    """A ten-minute flintlockd-serving request from `node`'s agent for `address`, finished."""
    async with cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), (address, host_id(node)))
        body = csr_body(cluster.name(stem), SERVING, pem, expiration_seconds=600)
        name = await cluster.create_csr(agent, body)
        return await until_csr(cluster.kube, name, finished, "finished")


def not_after(obj: dict[str, Any]) -> datetime.datetime:
    return x509.load_pem_x509_certificate(certificate_pem(obj)).not_valid_after_utc


def denied_for_pin(obj: dict[str, Any]) -> bool:
    denied = condition(obj, CSRCondition.DENIED)
    return denied is not None and denied["reason"] == CSRReason.ADDRESS_PINNED


@pytest.mark.req("CT-015", "CT-016", "CT-100")
async def test_a_pin_is_released_once_its_node_is_gone_and_its_certificates_have_expired(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    now = FakeClock()  # the approver's clock: it moves only when the test moves it
    registry = CollectorRegistry()
    address = "10.40.0.1"
    old = await cluster.node("host-old", address)
    new = await cluster.node("host-new", address)  # a replacement Machine, given the address
    caplog.set_level(logging.INFO, logger="batteryop.csr_approver")
    async with running(cluster, clock=now, metrics=ApproverMetrics(registry)):
        first = await serving_request(cluster, old, address, "old-1")
        assert signed(first)
        assert (await stored_pins(cluster)).entries[old].not_after == not_after(first)

        # Kept while its Node exists, though every certificate signed under it has expired.
        now.advance(datetime.timedelta(minutes=11))
        assert denied_for_pin(await serving_request(cluster, new, address, "new-1"))

        # A renewal moves the pin's expiry to the newest certificate's.
        renewed = await serving_request(cluster, old, address, "old-2")
        assert not_after(renewed) > not_after(first)
        assert (await stored_pins(cluster)).entries[old].not_after == not_after(renewed)

        # Kept after its Node is deleted, while the renewed certificate is still valid.
        await cluster.kube.delete(NODES, old)
        now.advance(
            datetime.timedelta(minutes=5)
        )  # past the first certificate, not the renewed one
        assert denied_for_pin(await serving_request(cluster, new, address, "new-2"))
        assert await pins(cluster) == {old: address}

        # Released once both hold; the Node reusing the address is approved and pinned.
        now.advance(datetime.timedelta(minutes=6))
        approved = await serving_request(cluster, new, address, "new-3")
    assert signed(approved)
    assert condition(approved, CSRCondition.APPROVED) is not None
    assert await pins(cluster) == {new: address}
    released = [r for r in caplog.records if r.getMessage() == "Released address pin"]
    assert [(r.__dict__["node"], r.__dict__["address"]) for r in released] == [(old, address)]
    assert registry.get_sample_value("battery_csr_approver_address_pins_released_total") == 1
    assert registry.get_sample_value("battery_csr_approver_address_pins") == 1


@pytest.mark.req("CT-016", "CT-100")
async def test_the_pins_config_map_does_not_grow_as_nodes_come_and_go(cluster: Cluster) -> None:
    now = FakeClock()  # the approver's clock: it moves only when the test moves it
    registry = CollectorRegistry()
    metrics = ApproverMetrics(registry)
    cycles = 8
    sizes = []
    for i in range(cycles):
        address = f"10.41.0.{i + 1}"  # never reused: the ConfigMap is bounded all the same
        node = await cluster.node(f"churn-{i}", address)
        # A new approver each cycle: what it releases comes from the ConfigMap alone.
        async with running(cluster, clock=now, metrics=metrics):
            assert signed(await serving_request(cluster, node, address, f"churn-{i}"))
        sizes.append(len(await pins(cluster)))
        await cluster.kube.delete(NODES, node)
        now.advance(datetime.timedelta(minutes=11))
    assert sizes == [1] * cycles
    assert registry.get_sample_value("battery_csr_approver_address_pins_released_total") == (
        cycles - 1
    )


# -- approved by someone else; other signers; restarts --------------------------------------


@pytest.mark.req("CT-006", "CT-008", "CT-003")
async def test_a_request_approved_by_someone_else_is_failed_if_a_check_fails(
    cluster: Cluster,
) -> None:
    node = await cluster.node("host-f", "10.33.0.1")
    async with cluster.client_as(node) as agent:
        # Made and approved by hand while the approver is down: a DNS name it never allows,
        # and a good request approved by hand too.
        bad = request_pem(ec_key(), ("10.33.0.1", host_id(node), "evil.example.test"))
        bad_name = await cluster.create_csr(agent, csr_body(cluster.name("bad"), SERVING, bad))
        good = request_pem(ec_key(), ("10.33.0.1", agent_id(node)))
        good_name = await cluster.create_csr(
            agent, csr_body(cluster.name("good"), AGENT_SERVING, good)
        )
    await cluster.set_condition(bad_name, CSRCondition.APPROVED, "ByHand")
    await cluster.set_condition(good_name, CSRCondition.APPROVED, "ByHand")
    async with running(cluster):
        failed = await until_csr(cluster.kube, bad_name, finished, "finished")
        ok = await until_csr(cluster.kube, good_name, finished, "finished")
    assert not signed(failed)
    fail = condition(failed, CSRCondition.FAILED)
    assert fail is not None and fail["reason"] == CSRReason.SUBJECT_ALT_NAMES_MISMATCH
    assert "subject-alt-names" in str(fail["message"])
    assert condition(failed, CSRCondition.DENIED) is None
    assert signed(ok)  # approved by someone else and passing every check: signed (CT-006)


@pytest.mark.req("CT-003")
async def test_a_request_denied_by_someone_else_is_never_signed(cluster: Cluster) -> None:
    node = await cluster.node("host-g", "10.34.0.1")
    async with cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), ("10.34.0.1", agent_id(node)))
        denied_name = await cluster.create_csr(
            agent, csr_body(cluster.name("denied"), AGENT_SERVING, pem)
        )
        await cluster.set_condition(denied_name, CSRCondition.DENIED, "ByHand")
        async with running(cluster):
            # A later request is finished after the approver has seen the denied one.
            pem = request_pem(ec_key(), ("10.34.0.1", agent_id(node)))
            later = await cluster.create_csr(
                agent, csr_body(cluster.name("later"), AGENT_SERVING, pem)
            )
            await until_csr(cluster.kube, later, signed, "signed")
    obj = await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, denied_name)
    assert not signed(obj)
    assert [x["type"] for x in obj["status"]["conditions"]] == [CSRCondition.DENIED]


async def foreign_then_ours(
    cluster: Cluster, agent: KubeClient, node: str, address: str, prefix: str
) -> tuple[str, str]:
    """As `node`'s agent: a request to another signer, then a good one to ours, awaited until
    it is signed (so the approver has seen the other first). The two requests' names."""
    pem = request_pem(ec_key(), (agent_id(node),))
    foreign = await cluster.create_csr(
        agent,
        csr_body(
            cluster.name(f"{prefix}foreign"),
            "example.test/other-signer",
            pem,
            usages=list(names.CLIENT_USAGES),
        ),
    )
    good = request_pem(ec_key(), (address, agent_id(node)))
    ours = await cluster.create_csr(
        agent, csr_body(cluster.name(f"{prefix}ours"), AGENT_SERVING, good)
    )
    await until_csr(cluster.kube, ours, signed, "signed")
    return foreign, ours


@pytest.mark.req("CT-102")
async def test_requests_for_other_signers_are_never_touched(cluster: Cluster) -> None:
    node = await cluster.node("host-h", "10.35.0.1")
    async with cluster.client_as(node) as agent, running(cluster):
        foreign, _ = await foreign_then_ours(cluster, agent, node, "10.35.0.1", "")
    obj = await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, foreign)
    assert not (obj.get("status") or {}).get("conditions")
    assert not signed(obj)


def kopf_traces(obj: dict[str, Any]) -> list[str]:
    """What kopf would leave on an object it wrote to: its finalizer, its annotations (progress,
    last-handled configuration, the retry "touch"), a managedFields entry under its name."""
    meta = obj["metadata"]
    return [
        *(f for f in meta.get("finalizers") or [] if "kopf" in f),
        *(a for a in meta.get("annotations") or {} if "kopf" in a),
        *(str(m["manager"]) for m in meta.get("managedFields") or [] if "kopf" in m["manager"]),
    ]


@pytest.mark.req("CT-102")
async def test_kopf_writes_nothing_to_the_requests_it_watches(cluster: Cluster) -> None:
    """kopf drives the approver (`kopf_driver`) and writes nothing to any request: ours carry
    only the approval and the certificate, other signers' nothing at all."""
    node = await cluster.node("host-k", "10.39.0.1")
    async with cluster.client_as(node) as agent, running(cluster):
        foreign, ours = await foreign_then_ours(cluster, agent, node, "10.39.0.1", "k-")
        # Another Node's identity: denied by the approver.
        bad = request_pem(ec_key(), ("10.39.0.1", agent_id("elsewhere")))
        denied = await cluster.create_csr(
            agent, csr_body(cluster.name("k-denied"), AGENT_SERVING, bad)
        )
        await denial(cluster, denied)
    for name in (ours, foreign, denied):
        obj = await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, name)
        assert kopf_traces(obj) == [], name
    assert [
        c["type"]
        for c in (await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, ours))["status"][
            "conditions"
        ]
    ] == [CSRCondition.APPROVED]


async def test_a_task_started_while_the_approver_runs_outlives_its_stop(cluster: Cluster) -> None:
    """kopf, as it stops, cancels every task of its event loop started after it, whoever
    started it. It has a loop of its own (`kopf_driver.run`), so a task the process started
    while the approver ran (in a test: the Exec Agent's certificate keepers) lives on."""
    node = await cluster.node("host-t", "10.40.0.1")
    released = asyncio.Event()
    async with cluster.client_as(node) as agent:
        async with running(cluster):
            pem = request_pem(ec_key(), ("10.40.0.1", agent_id(node)))
            name = await cluster.create_csr(agent, csr_body(cluster.name("t"), AGENT_SERVING, pem))
            await until_csr(cluster.kube, name, signed, "signed")  # kopf has started
            other = asyncio.create_task(released.wait())
        assert not other.done()
        released.set()
        assert await asyncio.wait_for(other, 5)


async def test_an_approved_request_left_by_a_stopped_approver_is_signed_after_a_restart(
    cluster: Cluster,
) -> None:
    node = await cluster.node("host-i", "10.36.0.1")
    async with cluster.client_as(node) as agent:
        pem = request_pem(ec_key(), ("10.36.0.1", host_id(node)))
        name = await cluster.create_csr(agent, csr_body(cluster.name("restart"), SERVING, pem))
    # The approver approved it and stopped before signing: simulated by approving as it would.
    await cluster.set_condition(name, CSRCondition.APPROVED, CSRReason.EXEC_AGENT_OWN_NODE)
    async with running(cluster):
        obj = await until_csr(cluster.kube, name, finished, "finished")
    assert signed(obj)
    base64.b64decode(obj["status"]["certificate"])
    assert await pins(cluster) == {node: "10.36.0.1"}


# -- as its own identity -------------------------------------------------------------------------


@pytest.mark.req("CT-102", "CT-010", "CT-014", "CT-106")
async def test_the_approver_works_with_only_its_own_least_privilege_rbac(
    cluster: Cluster,
) -> None:
    """Approve (and deny) needs `approve` on a signer, sign needs `sign`: the real API server
    checks both, so this also proves the approver needs no more than APPROVER_CLUSTER_RULES,
    which grant `sign` on the two serving signers only (CT-102) and the three CA Secrets."""
    credentials = await cluster.approver_credentials()
    node = await cluster.node("host-rbac", "10.37.0.1")
    async with running(cluster, credentials=credentials), cluster.client_as(node) as agent:
        serving = request_pem(ec_key(), ("10.37.0.1", host_id(node)))
        exec_serving = request_pem(ec_key(), ("10.37.0.1", agent_id(node)))
        first = await cluster.create_csr(agent, csr_body(cluster.name("s"), SERVING, serving))
        second = await cluster.create_csr(
            agent, csr_body(cluster.name("e"), AGENT_SERVING, exec_serving)
        )
        bad = request_pem(ec_key(), ("10.37.0.1", agent_id("elsewhere")))
        third = await cluster.create_csr(agent, csr_body(cluster.name("bad"), AGENT_SERVING, bad))
        client = request_pem(ec_key(), (agent_id(node),))
        fourth = await cluster.create_csr(agent, csr_body(cluster.name("c"), CLIENT, client))
        for name in (first, second):
            await until_csr(cluster.kube, name, signed, "signed")
        denied = await denial(cluster, third)
        client_denied = await denial(cluster, fourth)
        cm = await until(
            cluster.kube,
            CONFIGMAPS,
            names.CA_BUNDLE_CONFIG_MAP,
            lambda o: len(o.get("data") or {}) == 3,
            "published the three CAs",
            namespace=cluster.namespace,
        )
    assert denied["reason"] == CSRReason.SUBJECT_ALT_NAMES_MISMATCH
    assert client_denied["reason"] == CSRReason.CLIENT_SIGNED_ON_HOST
    assert await pins(cluster) == {node: "10.37.0.1"}
    assert cm["data"][names.SERVING_CA_BUNDLE_KEY].encode() == cluster.serving_ca.cert_pem


async def test_without_sign_on_the_signers_the_api_server_refuses_the_certificate(
    cluster: Cluster,
) -> None:
    """The RBAC the API server enforces: approving needs `approve` on the signer, storing a
    certificate needs `sign`. With `approve` only, requests are approved and stay unsigned."""
    rules = [dict(r) for r in APPROVER_CLUSTER_RULES]
    for rule in rules:
        if rule["resources"] == ["signers"]:
            rule["verbs"] = ["approve"]
    credentials = await cluster.approver_credentials(rules)
    node = await cluster.node("host-nosign", "10.38.0.1")
    async with (
        KubeClient(credentials) as as_approver,
        running(cluster, credentials=credentials),
        cluster.client_as(node) as agent,
    ):
        assert await as_approver.self_subject_access_review(
            "approve", "signers", group="certificates.k8s.io", name=AGENT_SERVING
        )
        assert not await as_approver.self_subject_access_review(
            "sign", "signers", group="certificates.k8s.io", name=AGENT_SERVING
        )
        pem = request_pem(ec_key(), ("10.38.0.1", agent_id(node)))
        name = await cluster.create_csr(agent, csr_body(cluster.name("nosign"), AGENT_SERVING, pem))
        obj = await until_csr(cluster.kube, name, decided, "decided")
        # The approval went through; the certificate write is refused (403) and retried, so
        # the request stays approved and unsigned for as long as the grant is missing. The
        # same write, made here with the approver's credentials, shows the refusal.
        body = {
            **obj,
            "status": {
                **obj["status"],
                "certificate": base64.b64encode(
                    cluster.exec_serving_ca.issue(node, server=True).cert_pem
                ).decode(),
            },
        }
        with pytest.raises(ForbiddenError):
            await as_approver.replace(
                CERTIFICATE_SIGNING_REQUESTS, name, body, subresource="status"
            )
    assert condition(obj, CSRCondition.APPROVED) is not None
    assert not signed(await cluster.kube.get(CERTIFICATE_SIGNING_REQUESTS, name))
