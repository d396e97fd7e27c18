"""The CAs, read from their Secrets, and the certificates they issue.

A CA Secret has the `kubernetes.io/tls` layout cert-manager writes: `tls.crt` holds the CA
certificate first (any chain after it is ignored), `tls.key` its key. The certificate must be a
CA (basic constraints) and the key must be its key; otherwise `CAError` names the Secret.

`issue` makes the leaf (CT-004, CT-007): subject CN = the requester's Node, whatever the request
asked; the SANs the checks approved; extended key usage server auth (only the serving signers
are signed: CT-102); key usage, key identifiers and the rest as every leaf of ours has them
(`batteryop.tls.leaf`: key encipherment only for an RSA key); a random serial (cryptography's,
159 bits); not before = now minus five minutes, never before the CA's own; not
after = now plus the shorter of `expirationSeconds` and the configured maximum, never after the
CA's own. A CA that has expired signs nothing (`CAError`).

Neither a key nor a key's PEM is ever logged or put in an error message.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from batteryop.api import names
from batteryop.csr_approver.checks import SERVING_SIGNERS, Approval
from batteryop.tls.leaf import leaf_certificate

BACKDATE: Final = datetime.timedelta(minutes=5)
"""How far before now a certificate becomes valid, for clocks a little behind ours."""


class CAError(Exception):
    """A CA Secret cannot be used to sign: `secret` names it, `problem` says why."""

    def __init__(self, secret: str, problem: str) -> None:
        super().__init__(f"CA Secret {secret}: {problem}")
        self.secret = secret
        self.problem = problem


def _b64(secret: str, data: Mapping[str, Any], key: str) -> bytes:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise CAError(secret, f"has no {key}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CAError(secret, f"{key} is not base64") from None


@dataclass(frozen=True)
class CA:
    """A CA certificate and its key, from the Secret `secret`."""

    secret: str
    cert: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes

    @classmethod
    def from_secret(cls, obj: Mapping[str, Any]) -> CA:
        name = str((obj.get("metadata") or {}).get("name") or "?")
        data = obj.get("data") or {}
        if not isinstance(data, Mapping):
            raise CAError(name, "has no data")
        cert_pem = _b64(name, data, "tls.crt")
        key_pem = _b64(name, data, "tls.key")
        try:
            cert = x509.load_pem_x509_certificates(cert_pem)[0]
        except (ValueError, IndexError):
            raise CAError(name, "tls.crt holds no PEM certificate") from None
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            # Never chain the original error: its text could quote the key material.
            raise CAError(name, "tls.key holds no unencrypted PEM private key") from None
        if not isinstance(
            key,
            ec.EllipticCurvePrivateKey
            | rsa.RSAPrivateKey
            | ed25519.Ed25519PrivateKey
            | ed448.Ed448PrivateKey,
        ):
            raise CAError(name, f"a {type(key).__name__} key cannot sign certificates")
        spki = serialization.PublicFormat.SubjectPublicKeyInfo
        der = serialization.Encoding.DER
        if key.public_key().public_bytes(der, spki) != cert.public_key().public_bytes(der, spki):
            raise CAError(name, "tls.key is not the key of the certificate in tls.crt")
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise CAError(name, "the certificate in tls.crt is not a CA")
        return cls(secret=name, cert=cert, key=key)

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate alone, re-encoded (never the key)."""
        return self.cert.public_bytes(serialization.Encoding.PEM)


def validity(
    ca: CA,
    now: datetime.datetime,
    max_duration: datetime.timedelta,
    requested_seconds: int | None,
) -> tuple[datetime.datetime, datetime.datetime]:
    """CT-004: (not before, not after), capped by the maximum and by the CA's own validity."""
    ca_start = ca.cert.not_valid_before_utc
    ca_end = ca.cert.not_valid_after_utc
    if now >= ca_end:
        raise CAError(ca.secret, f"the CA expired at {ca_end.isoformat()}")
    lifetime = max_duration
    if requested_seconds is not None:
        lifetime = min(lifetime, datetime.timedelta(seconds=requested_seconds))
    return max(now - BACKDATE, ca_start), min(now + lifetime, ca_end)


def issue(
    ca: CA,
    approval: Approval,
    signer: str,
    *,
    now: datetime.datetime,
    max_duration: datetime.timedelta,
    requested_seconds: int | None,
) -> x509.Certificate:
    """The certificate for an approved request (CT-004, CT-007)."""
    not_before, not_after = validity(ca, now, max_duration, requested_seconds)
    public = approval.csr.public_key()
    if signer not in SERVING_SIGNERS:
        raise ValueError(f"signer {signer!r} is never signed here (CT-102)")
    assert isinstance(
        public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
    )  # checks.parse_request accepts only these
    return leaf_certificate(
        # CT-007: the Node's name, whatever subject the request asked for.
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, approval.node)]),
        public_key=public,
        issuer=ca.cert,
        issuer_key=ca.key,
        not_before=not_before,
        not_after=not_after,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=approval.subject_alt_names,
    )


def ca_secret_for(signer: str, serving_secret: str, exec_agent_serving_secret: str) -> str:
    """CT-103: the serving CA for flintlockd's serving certificates, the Exec Agent serving CA
    for the agents' (CT-101: it signs nothing else). No other signer is signed (CT-102): the
    client CA signs no request, so asking for any other signer's CA is a `ValueError`."""
    if signer == names.EXEC_AGENT_SERVING_SIGNER:
        return exec_agent_serving_secret  # CT-101
    if signer == names.FLINTLOCKD_SERVING_SIGNER:
        return serving_secret
    raise ValueError(f"signer {signer!r} is signed by no CA of the approver (CT-102)")
