"""Each approval check passing and failing, on requests built in memory (no server)."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping, Sequence

import pytest
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa

from batteryop.api import names
from batteryop.api.conditions import CSRReason
from batteryop.csr_approver.checks import (
    MAX_REQUEST_BYTES,
    Approval,
    Facts,
    Failure,
    NodeFacts,
    review,
    service_account_username,
)
from batteryop.csr_approver.request import Request
from batteryop.testing.csrs import SigningKey, csr_object, ec_key, request_pem

TD = "example.test"
AGENT = service_account_username("ops", "exec-agent")
NODE = "host-a"
IP = "10.0.0.5"
SERVING = names.FLINTLOCKD_SERVING_SIGNER
CLIENT = names.FLINTLOCKD_CLIENT_SIGNER
AGENT_SERVING = names.EXEC_AGENT_SERVING_SIGNER
HOST_ID = names.spiffe_host_id(TD, NODE)
AGENT_ID = names.spiffe_exec_agent_id(TD, NODE)
A_NODE = NodeFacts(NODE, (ipaddress.ip_address(IP), ipaddress.ip_address("fd00::5")))


def facts(node: NodeFacts | None = A_NODE, pins: Mapping[str, str] | None = None) -> Facts:
    return Facts(trust_domain=TD, exec_agent_username=AGENT, node=node, pins=pins or {})


def request(
    signer: str = SERVING,
    sans: Sequence[str] = (IP, HOST_ID),
    *,
    key: SigningKey | None = None,
    username: str = AGENT,
    extra: Mapping[str, Sequence[str]] | None = None,
    usages: Sequence[str] | None = None,
    pem: bytes | None = None,
) -> Request:
    pem = pem if pem is not None else request_pem(key or ec_key(), sans)
    obj = csr_object(
        signer,
        pem,
        username=username,
        extra={names.NODE_NAME_EXTRA: [NODE]} if extra is None else extra,
        usages=usages,
    )
    return Request.from_object(obj)


def failed(result: Approval | Failure, check: str, reason: CSRReason) -> Failure:
    assert isinstance(result, Failure), result
    assert (result.check, result.reason) == (check, reason), result
    assert result.message.startswith(f"The {check} check failed: ")
    return result


# -- passing --------------------------------------------------------------------------------


@pytest.mark.req("CT-010")
def test_a_flintlockd_serving_request_for_its_own_node_passes() -> None:
    result = review(request(SERVING, (IP, HOST_ID)), facts())
    assert isinstance(result, Approval)
    assert (result.node, result.uri, str(result.ip), result.pin) == (NODE, HOST_ID, IP, True)


@pytest.mark.req("CT-014")
def test_an_exec_agent_serving_request_for_its_own_node_passes() -> None:
    result = review(request(AGENT_SERVING, ("fd00::5", AGENT_ID)), facts())
    assert isinstance(result, Approval)
    assert str(result.ip) == "fd00::5"


@pytest.mark.req("CT-102")
@pytest.mark.parametrize(
    ("sans", "username"),
    [((AGENT_ID,), AGENT), ((IP, AGENT_ID), AGENT), ((AGENT_ID,), "system:node:host-a")],
    ids=["as-asked-before", "with-an-ip", "another-requester"],
)
def test_a_client_request_is_denied_whatever_it_asks(sans: Sequence[str], username: str) -> None:
    result = failed(review(request(CLIENT, sans, username=username), facts()), "client-signer",
                    CSRReason.CLIENT_SIGNED_ON_HOST)  # fmt: skip
    assert "EA-126" in result.detail and "CT-102" in result.detail


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP384R1()),
        ed25519.Ed25519PrivateKey.generate(),
        rsa.generate_private_key(65537, 2048),
    ],
    ids=["p384", "ed25519", "rsa2048"],
)
def test_accepted_key_types_pass(key: SigningKey) -> None:
    assert isinstance(review(request(AGENT_SERVING, (IP, AGENT_ID), key=key), facts()), Approval)


# -- signer, requester, requester's Node ----------------------------------------------------


@pytest.mark.req("CT-102")
def test_another_signer_fails_the_signer_check() -> None:
    failed(review(request("kubernetes.io/kubelet-serving"), facts()), "signer",
           CSRReason.UNKNOWN_SIGNER_NAME)  # fmt: skip


@pytest.mark.req("CT-010", "CT-014")
@pytest.mark.parametrize("signer", [SERVING, AGENT_SERVING])
@pytest.mark.parametrize(
    "username",
    [
        service_account_username("ops", "other"),
        service_account_username("elsewhere", "exec-agent"),
        "system:node:host-a",
        "",
    ],
)
def test_any_other_requester_fails_the_requester_check(signer: str, username: str) -> None:
    sans = (IP, HOST_ID if signer == SERVING else AGENT_ID)
    failed(review(request(signer, sans, username=username), facts()), "requester",
           CSRReason.REQUESTER_NOT_EXEC_AGENT)  # fmt: skip


@pytest.mark.parametrize("values", [[], [NODE, "host-b"], [""]], ids=["none", "two", "empty"])
def test_a_requester_without_exactly_one_node_fails_the_requester_node_check(
    values: list[str],
) -> None:
    extra = {names.NODE_NAME_EXTRA: values} if values else {}
    failed(review(request(extra=extra), facts()), "requester-node",
           CSRReason.REQUESTER_NODE_MISSING)  # fmt: skip


@pytest.mark.req("CT-010", "CT-014")
@pytest.mark.parametrize("signer", [SERVING, AGENT_SERVING])
def test_a_serving_request_for_a_missing_node_fails_the_node_check(signer: str) -> None:
    uri = HOST_ID if signer == SERVING else AGENT_ID
    failed(review(request(signer, (IP, uri)), facts(node=None)), "node", CSRReason.NODE_NOT_FOUND)


# -- the PEM itself -------------------------------------------------------------------------


def _pem_request(pem: bytes) -> Request:
    return request(pem=pem)


@pytest.mark.parametrize(
    "pem",
    [
        b"",
        b"not a pem",
        b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ],
    ids=["empty", "text", "garbage-body", "wrong-block"],
)
def test_a_malformed_pem_fails_the_request_check(pem: bytes) -> None:
    failed(review(_pem_request(pem), facts()), "request", CSRReason.INVALID_REQUEST)


def test_two_pem_blocks_fail_the_request_check() -> None:
    one = request_pem(ec_key(), (IP, HOST_ID))
    failed(review(_pem_request(one + one), facts()), "request", CSRReason.INVALID_REQUEST)


def test_spec_request_that_is_not_base64_fails_the_request_check() -> None:
    obj = csr_object(SERVING, b"", username=AGENT, extra={names.NODE_NAME_EXTRA: [NODE]})
    obj["spec"]["request"] = "%%% not base64 %%%"
    failed(review(Request.from_object(obj), facts()), "request", CSRReason.INVALID_REQUEST)


def test_a_broken_self_signature_fails_the_request_check() -> None:
    pem = request_pem(ec_key(), (IP, HOST_ID))
    body = b"".join(pem.splitlines()[1:-1])
    der = bytearray(base64.b64decode(body))
    der[-3] ^= 0xFF  # inside the signature
    tampered = (
        b"-----BEGIN CERTIFICATE REQUEST-----\n"
        + base64.encodebytes(bytes(der))
        + b"-----END CERTIFICATE REQUEST-----\n"
    )
    result = failed(review(_pem_request(tampered), facts()), "request", CSRReason.INVALID_REQUEST)
    assert "signature" in result.detail or "parse" in result.detail


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP521R1()),
        ec.generate_private_key(ec.SECP256K1()),
        rsa.generate_private_key(65537, 1024),
        dsa.generate_private_key(2048),
    ],
    ids=["p521", "secp256k1", "rsa1024", "dsa"],
)
def test_an_unaccepted_key_type_fails_the_request_check(key: object) -> None:
    if isinstance(key, dsa.DSAPrivateKey):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization

        pem = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([]))
            .sign(key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM)
        )
    else:
        assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
        pem = request_pem(key, (IP, HOST_ID))
    result = failed(review(_pem_request(pem), facts()), "request", CSRReason.INVALID_REQUEST)
    assert "not accepted" in result.detail


def test_a_huge_san_list_is_refused_by_size_not_parsed() -> None:
    sans = [IP, HOST_ID, *(f"10.1.{i // 250}.{i % 250}" for i in range(5000))]
    pem = request_pem(ec_key(), sans)
    assert len(pem) > MAX_REQUEST_BYTES
    result = failed(review(_pem_request(pem), facts()), "request", CSRReason.INVALID_REQUEST)
    assert str(MAX_REQUEST_BYTES) in result.detail


def test_many_sans_under_the_size_bound_fail_the_subject_alt_names_check() -> None:
    sans = [IP, HOST_ID, *(f"10.1.0.{i}" for i in range(100))]
    result = failed(review(request(sans=sans), facts()), "subject-alt-names",
                    CSRReason.SUBJECT_ALT_NAMES_MISMATCH)  # fmt: skip
    assert len(result.message) < 300


# -- usages -----------------------------------------------------------------------------------


@pytest.mark.req("CT-104")
@pytest.mark.parametrize(
    ("signer", "usages"),
    [
        (SERVING, ["digital signature", "key encipherment", "client auth"]),
        (SERVING, ["digital signature", "key encipherment"]),
        (SERVING, ["digital signature", "key encipherment", "server auth", "client auth"]),
        (AGENT_SERVING, ["digital signature", "server auth", "server auth"]),
    ],
)
def test_usages_other_than_exactly_the_signers_fail(signer: str, usages: list[str]) -> None:
    sans = (IP, HOST_ID if signer == SERVING else AGENT_ID)
    failed(review(request(signer, sans, usages=usages), facts()), "key-usages",
           CSRReason.KEY_USAGES_MISMATCH)  # fmt: skip


@pytest.mark.req("CT-104")
def test_usages_in_another_order_pass() -> None:
    usages = ["server auth", "digital signature", "key encipherment"]
    assert isinstance(review(request(usages=usages), facts()), Approval)


# -- SANs -------------------------------------------------------------------------------------


@pytest.mark.req("CT-010")
@pytest.mark.parametrize(
    "sans",
    [
        (HOST_ID,),
        (IP,),
        (IP, HOST_ID, "host-a.example"),
        (IP, HOST_ID, "mail:a@example.test"),
        (IP, "10.0.0.6", HOST_ID),
        (IP, HOST_ID, HOST_ID),
        (IP, AGENT_ID),
        (IP, names.spiffe_host_id(TD, "host-b")),
        (IP, names.spiffe_host_id("other.test", NODE)),
    ],
    ids=["no-ip", "no-uri", "dns", "email", "two-ips", "two-uris", "agent-id", "other-node",
         "other-domain"],  # fmt: skip
)
def test_flintlockd_serving_sans_other_than_exactly_required_fail(sans: Sequence[str]) -> None:
    failed(review(request(SERVING, sans), facts()), "subject-alt-names",
           CSRReason.SUBJECT_ALT_NAMES_MISMATCH)  # fmt: skip


@pytest.mark.req("CT-014")
@pytest.mark.parametrize("sans", [(IP, HOST_ID), (IP,), (IP, AGENT_ID, "x.example")])
def test_exec_agent_serving_sans_other_than_exactly_required_fail(sans: Sequence[str]) -> None:
    failed(review(request(AGENT_SERVING, sans), facts()), "subject-alt-names",
           CSRReason.SUBJECT_ALT_NAMES_MISMATCH)  # fmt: skip


@pytest.mark.req("CT-010", "CT-014")
@pytest.mark.parametrize("ip", ["10.0.0.6", "192.168.1.5"])
def test_an_address_that_is_not_the_nodes_fails_the_node_address_check(ip: str) -> None:
    failed(review(request(SERVING, (ip, HOST_ID)), facts()), "node-address",
           CSRReason.SUBJECT_ALT_NAMES_MISMATCH)  # fmt: skip


def test_only_internal_addresses_count() -> None:
    node = NodeFacts.from_object(
        {
            "metadata": {"name": NODE},
            "status": {
                "addresses": [
                    {"type": "ExternalIP", "address": "203.0.113.5"},
                    {"type": "InternalIP", "address": IP},
                    {"type": "Hostname", "address": NODE},
                ]
            },
        }
    )
    assert node.internal_addresses == (ipaddress.ip_address(IP),)
    failed(review(request(SERVING, ("203.0.113.5", HOST_ID)), facts(node=node)), "node-address",
           CSRReason.SUBJECT_ALT_NAMES_MISMATCH)  # fmt: skip


# -- address pins -----------------------------------------------------------------------------


@pytest.mark.req("CT-015")
def test_the_pinned_address_passes_and_needs_no_new_pin() -> None:
    result = review(request(), facts(pins={NODE: IP, "host-b": "10.0.0.9"}))
    assert isinstance(result, Approval)
    assert result.pin is False


@pytest.mark.req("CT-015")
def test_an_address_other_than_the_nodes_pin_fails() -> None:
    result = failed(review(request(), facts(pins={NODE: "fd00::5"})), "address-pin",
                    CSRReason.ADDRESS_PINNED)  # fmt: skip
    assert "fd00::5" in result.detail


@pytest.mark.req("CT-015")
def test_an_address_pinned_to_another_node_fails() -> None:
    result = failed(review(request(), facts(pins={"host-b": IP})), "address-pin",
                    CSRReason.ADDRESS_PINNED)  # fmt: skip
    assert "host-b" in result.detail


# -- reading a body never fails ---------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [{}, {"spec": None}, {"spec": {"usages": "x", "extra": [1]}, "status": {"conditions": 3}}],
)
def test_a_body_of_the_wrong_shape_reads_and_is_refused(obj: dict[str, object]) -> None:
    result = review(Request.from_object(obj), facts())
    assert isinstance(result, Failure)
