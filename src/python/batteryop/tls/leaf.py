"""`leaf_certificate`: the one builder of a leaf (end-entity) certificate, for every CA of ours.

The CSR approver signs the Exec Agents' and flintlockd's serving certificates with it
(`csr_approver.signing.issue`), each Exec Agent's Host CA its flintlockd client certificate
(`exec_agent.host_ca.HostCA.sign_client`), the local stack and the test harnesses their serving
and client certificates (`pki.CertificateAuthority.sign`), so all of them issue certificates
with the same extensions:

- basic constraints `CA:FALSE`, critical;
- key usage, critical: digital signature, and key encipherment only for an RSA key. RFC 5280
  §4.2.1.3 ties key encipherment to keys used for key transport, which only RSA does (TLS 1.2's
  RSA key exchange); RFC 8813 §3 says it MUST NOT be asserted for an elliptic-curve key
  (`id-ecPublicKey`), RFC 8410 §5 allows only signature usages for Ed25519, and the CA/Browser
  Forum's Baseline Requirements (§7.1.2.7.11) forbid it for ECDSA subscriber certificates. Our
  keys are EC P-256 (`pki.new_key`, the Exec Agent's requests); the approver also accepts RSA
  and Ed25519 requests (`checks`);
- extended key usage as given;
- subject key identifier from the public key (RFC 5280 §4.2.1.2: SHOULD in an end-entity
  certificate; it lets a chain builder match this certificate as an issuer's key);
- authority key identifier (RFC 5280 §4.2.1.1: MUST in every certificate not self-signed): the
  issuer's own subject key identifier when it has one, so the two match byte for byte, else
  the one derived from the issuer's public key;
- subject alternative names as given, when there are any.

Signed with SHA-256, or with no separate digest for an Ed25519 or Ed448 issuer key.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
)


def authority_key_identifier(
    issuer: x509.Certificate, issuer_key: CertificateIssuerPrivateKeyTypes
) -> x509.AuthorityKeyIdentifier:
    """RFC 5280 §4.2.1.1: from the issuer's subject key identifier, else its public key."""
    try:
        ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def leaf_key_usage(public: CertificatePublicKeyTypes) -> x509.KeyUsage:
    """Digital signature; key encipherment only for an RSA key (the module docstring says why)."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=isinstance(public, rsa.RSAPublicKey),
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def leaf_certificate(
    *,
    subject: x509.Name,
    public_key: CertificatePublicKeyTypes,
    issuer: x509.Certificate,
    issuer_key: CertificateIssuerPrivateKeyTypes,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    usages: Sequence[x509.ObjectIdentifier],
    sans: Sequence[x509.GeneralName] = (),
) -> x509.Certificate:
    """A leaf certificate for `public_key`, signed by `issuer_key` as `issuer`."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(leaf_key_usage(public_key), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(authority_key_identifier(issuer, issuer_key), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    algorithm = (
        None
        if isinstance(issuer_key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey)
        else hashes.SHA256()
    )
    return builder.sign(issuer_key, algorithm)
