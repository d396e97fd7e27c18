"""CAs read from Secrets, and the certificates they issue (no server)."""

from __future__ import annotations

import base64
import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from batteryop.api import names
from batteryop.csr_approver.checks import Approval, Facts, NodeFacts, review
from batteryop.csr_approver.request import Request
from batteryop.csr_approver.signing import BACKDATE, CA, CAError, ca_secret_for, issue, validity
from batteryop.testing.csrs import SigningKey, csr_object, ec_key, request_pem
from batteryop.tls import CertificateAuthority

TD = "example.test"
AGENT = "system:serviceaccount:ops:exec-agent"
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
WEEK = datetime.timedelta(hours=168)


def tls_secret(name: str, cert_pem: bytes, key_pem: bytes) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(cert_pem).decode(),
            "tls.key": base64.b64encode(key_pem).decode(),
        },
    }


def make_ca(name: str = "serving", days: float = 3650) -> CA:
    made = CertificateAuthority.create(name, validity=datetime.timedelta(days=days))
    return CA.from_secret(tls_secret(name, made.cert_pem, made.pair.key_pem))


def approval(
    signer: str = names.FLINTLOCKD_SERVING_SIGNER, key: SigningKey | None = None
) -> Approval:
    node = "host-a"
    if signer == names.EXEC_AGENT_SERVING_SIGNER:
        sans: tuple[str, ...] = ("10.0.0.5", names.spiffe_exec_agent_id(TD, node))
    else:
        sans = ("10.0.0.5", names.spiffe_host_id(TD, node))
    pem = request_pem(key or ec_key(), sans, common_name="asked-for-something-else")
    obj = csr_object(signer, pem, username=AGENT, extra={names.NODE_NAME_EXTRA: [node]})
    facts = Facts(TD, AGENT, NodeFacts(node, (ipaddress.ip_address("10.0.0.5"),)))
    result = review(Request.from_object(obj), facts)
    assert isinstance(result, Approval)
    return result


def test_a_ca_secret_loads() -> None:
    ca = make_ca()
    assert ca.secret == "serving"
    assert b"PRIVATE" not in ca.cert_pem


def test_a_leaf_certificate_is_not_a_ca() -> None:
    made = CertificateAuthority.create("root")
    leaf = made.issue("leaf", server=True)
    with pytest.raises(CAError, match="not a CA"):
        CA.from_secret(tls_secret("s", leaf.cert_pem, leaf.key_pem))


def test_a_key_that_is_not_the_certificates_is_refused_without_quoting_it() -> None:
    made = CertificateAuthority.create("root")
    other = CertificateAuthority.create("other")
    with pytest.raises(CAError) as caught:
        CA.from_secret(tls_secret("s", made.cert_pem, other.pair.key_pem))
    assert "not the key" in str(caught.value)
    assert "PRIVATE" not in str(caught.value)


@pytest.mark.parametrize("data", [{}, {"tls.crt": "x", "tls.key": "y"}, None])
def test_an_unusable_secret_is_a_ca_error(data: object) -> None:
    with pytest.raises(CAError):
        CA.from_secret({"metadata": {"name": "s"}, "data": data})


@pytest.mark.req("CT-101", "CT-102", "CT-103")
def test_each_serving_signer_has_its_ca_and_the_client_signer_none() -> None:
    assert ca_secret_for(names.FLINTLOCKD_SERVING_SIGNER, "srv", "exec") == "srv"
    assert ca_secret_for(names.EXEC_AGENT_SERVING_SIGNER, "srv", "exec") == "exec"
    with pytest.raises(ValueError, match="CT-102"):
        ca_secret_for(names.FLINTLOCKD_CLIENT_SIGNER, "srv", "exec")


@pytest.mark.req("CT-004")
@pytest.mark.parametrize(
    ("requested", "expected"),
    [(None, WEEK), (3600, datetime.timedelta(hours=1)), (10 * 168 * 3600, WEEK)],
)
def test_the_lifetime_is_the_shorter_of_the_request_and_the_maximum(
    requested: int | None, expected: datetime.timedelta
) -> None:
    ca = make_ca()
    start = ca.cert.not_valid_before_utc
    now = start + datetime.timedelta(days=1)
    not_before, not_after = validity(ca, now, WEEK, requested)
    assert not_before == now - BACKDATE
    assert not_after == now + expected


@pytest.mark.req("CT-004")
def test_the_lifetime_never_passes_the_cas_expiry() -> None:
    ca = make_ca(days=2)
    now = ca.cert.not_valid_before_utc + datetime.timedelta(minutes=1)
    not_before, not_after = validity(ca, now, WEEK, None)
    assert not_after == ca.cert.not_valid_after_utc
    assert not_before == ca.cert.not_valid_before_utc  # never before the CA's own start


def test_an_expired_ca_signs_nothing() -> None:
    ca = make_ca(days=1)
    with pytest.raises(CAError, match="expired"):
        validity(ca, ca.cert.not_valid_after_utc, WEEK, None)


@pytest.mark.req("CT-007", "CT-004")
def test_a_serving_certificate_names_the_node_and_only_the_approved_names() -> None:
    ca = make_ca()
    now = ca.cert.not_valid_before_utc + datetime.timedelta(hours=1)
    cert = issue(ca, approval(), names.FLINTLOCKD_SERVING_SIGNER, now=now, max_duration=WEEK,
                 requested_seconds=7200)  # fmt: skip
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "host-a"
    assert cert.issuer == ca.cert.subject
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
        names.spiffe_host_id(TD, "host-a")
    ]
    assert san.get_values_for_type(x509.DNSName) == []
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    # An EC key: no key encipherment (RFC 8813; `batteryop.tls.leaf` says why).
    assert ku.digital_signature and not ku.key_encipherment and not ku.key_cert_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc == now + datetime.timedelta(hours=2)
    assert isinstance(ca.cert.public_key(), ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca.cert)


@pytest.mark.req("CT-102")
def test_a_client_certificate_is_never_issued() -> None:
    ca = make_ca("client")
    now = ca.cert.not_valid_before_utc + datetime.timedelta(hours=1)
    with pytest.raises(ValueError, match="never signed here"):
        issue(ca, approval(names.EXEC_AGENT_SERVING_SIGNER), names.FLINTLOCKD_CLIENT_SIGNER,
              now=now, max_duration=WEEK, requested_seconds=None)  # fmt: skip


def extensions(cert: x509.Certificate) -> dict[x509.ObjectIdentifier, tuple[bool, object]]:
    """Each extension's (criticality, value), with the values that name this certificate's own
    key, issuer or names (key identifiers, SANs) replaced by their type."""
    own = (x509.SubjectKeyIdentifier, x509.AuthorityKeyIdentifier, x509.SubjectAlternativeName)
    return {
        e.oid: (e.critical, type(e.value) if isinstance(e.value, own) else e.value)
        for e in cert.extensions
    }


def test_the_approver_and_the_local_pki_issue_leaves_with_the_same_extensions() -> None:
    """One leaf builder (`batteryop.tls.leaf`): a serving certificate the CSR approver signs and
    one the local stack's pki issues carry the same extensions, key identifiers included."""
    made = CertificateAuthority.create("serving", validity=datetime.timedelta(days=10))
    ca = CA.from_secret(tls_secret("serving", made.cert_pem, made.pair.key_pem))
    now = ca.cert.not_valid_before_utc + datetime.timedelta(hours=1)
    approved = issue(ca, approval(), names.FLINTLOCKD_SERVING_SIGNER, now=now, max_duration=WEEK,
                     requested_seconds=None)  # fmt: skip
    local = x509.load_pem_x509_certificate(
        made.issue("host-a", hosts=["10.0.0.5"], server=True).cert_pem
    )
    assert extensions(approved) == extensions(local)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    for cert in (approved, local):
        aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        assert aki.key_identifier == ca_ski.digest  # RFC 5280 4.2.1.1: MUST
        ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert ski == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
        cert.verify_directly_issued_by(ca.cert)


def test_only_an_rsa_key_gets_key_encipherment() -> None:
    ca = make_ca()
    now = ca.cert.not_valid_before_utc + datetime.timedelta(hours=1)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = issue(ca, approval(key=rsa_key), names.FLINTLOCKD_SERVING_SIGNER, now=now,
                 max_duration=WEEK, requested_seconds=None)  # fmt: skip
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_encipherment
