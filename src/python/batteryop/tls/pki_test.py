import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from batteryop.tls import CertificateAuthority, make_csr, new_key


def test_issued_server_cert_verifies_against_its_ca_and_names_its_hosts(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    pair = ca.issue("apiserver", hosts=["127.0.0.1", "localhost"], server=True)
    crt, key = pair.write(tmp_path, "server")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    ctx = ssl.create_default_context(cafile=None, cadata=ca.cert_pem.decode())
    ctx.load_cert_chain(crt, key)  # the pair matches
    pair.cert.verify_directly_issued_by(ca.pair.cert)
    san = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_other_ca_does_not_verify() -> None:
    pair = CertificateAuthority.create("a").issue("x", client=True)
    with pytest.raises((ValueError, x509.verification.VerificationError)):
        pair.cert.verify_directly_issued_by(CertificateAuthority.create("b").pair.cert)


def test_signed_csr_keeps_subject_and_spiffe_san() -> None:
    ca = CertificateAuthority.create("ca")
    pem = make_csr(
        new_key(), "system:node:h1", organizations=["system:nodes"], hosts=["spiffe://x/y"]
    )
    cert = ca.sign_csr(x509.load_pem_x509_csr(pem), client=True)
    assert cert.subject.rfc4514_string() == "CN=system:node:h1,O=system:nodes"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://x/y"]
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) <= datetime.timedelta(
        days=1
    )


def test_issue_requires_a_usage() -> None:
    with pytest.raises(ValueError, match="server= or client="):
        CertificateAuthority.create("ca").issue("x")
