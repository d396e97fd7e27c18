"""The Exec Agent's Host CA and flintlockd's files on the Host (EA-064, EA-125, EA-126).

- `HostCA`: the Host's own client CA, a P-256 key made here and a self-signed certificate
  naming the Node (built by `tls.pki.CertificateAuthority.create`), which signs the agent's
  flintlockd client certificates in memory.
- `CertDir`: `--flintlockd-cert-dir`: the Host CA's key and certificate, flintlockd's key,
  client CAs and certificate, each written atomically in a folder made 0700.

`certs.AgentCertificates` uses both; see its module docstring for the whole story.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from batteryop.api import names
from batteryop.tls import (
    CertificateAuthority,
    cert_pem,
    key_pem,
    new_key,
    private_dir,
    write_atomic,
)
from batteryop.tls.leaf import leaf_certificate

log = logging.getLogger(__name__)

CLOCK_SKEW: Final = timedelta(minutes=5)
"""A certificate whose notBefore is at most this far ahead of our clock is accepted."""

HOST_CA_VALIDITY: Final = timedelta(days=3650)
"""Lifetime of the Host's client CA certificate (EA-126)."""
HOST_CA_RENEW_LEFT: Final = 1 / 3
"""The Host CA certificate is re-issued, for the same key, once less than this fraction of its
validity is left (EA-126); what it signed before still verifies."""


def public_bytes(key: Any) -> bytes:
    """A public key's DER SubjectPublicKeyInfo, to compare keys."""
    return bytes(
        key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _ca_common_name(node: str) -> str:
    return f"exec-agent host CA {node}"


def _ca_name(node: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _ca_common_name(node))])


@dataclass(frozen=True)
class HostCA:
    """The Host's own client CA (EA-126): an ECDSA P-256 key made on the Host and kept in
    flintlockd's folder (mode 0600), and a self-signed CA certificate naming the Node. It signs
    this Host's agent's flintlockd client certificates; only this Host's flintlockd trusts it,
    so an agent's client key opens no other Host's flintlockd."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    @classmethod
    def self_signed(
        cls, key: ec.EllipticCurvePrivateKey, node: str, now: datetime.datetime
    ) -> HostCA:
        # D6: the one CA builder; path length 0, as it signs the agent's client certificates only.
        ca = CertificateAuthority.create(
            _ca_common_name(node), HOST_CA_VALIDITY, key=key, now=now, path_length=0
        )
        return cls(key, ca.pair.cert)

    def fit(self, node: str, now: datetime.datetime) -> bool:
        """Its certificate is for its key, names `node`, and has more than a third of its
        validity left (the renewal rule)."""
        cert = self.cert
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        return (
            public_bytes(cert.public_key()) == public_bytes(self.key.public_key())
            and cert.subject == _ca_name(node)
            and cert.not_valid_before_utc - CLOCK_SKEW <= now
            and cert.not_valid_after_utc - now > life * HOST_CA_RENEW_LEFT
        )

    def sign_client(
        self,
        key: ec.EllipticCurvePrivateKey,
        node: str,
        uri: str,
        now: datetime.datetime,
        duration: timedelta,
    ) -> bytes:
        """The agent's flintlockd client certificate (EA-126): subject the Node, `uri` its only
        SAN, client auth, valid `duration` (never past the CA)."""
        cert = leaf_certificate(  # the one leaf builder: the same extensions as every CA of ours
            subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]),
            public_key=key.public_key(),
            issuer=self.cert,
            issuer_key=self.key,
            not_before=now - CLOCK_SKEW,
            not_after=min(now + duration, self.cert.not_valid_after_utc),
            usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
            sans=[x509.UniformResourceIdentifier(uri)],
        )
        return cert_pem(cert)


@dataclass(frozen=True)
class CertDir:
    """flintlockd's files on the Host (EA-064)."""

    path: Path

    @property
    def cert(self) -> Path:
        return self.path / names.TLS_CERT_FILE

    @property
    def key(self) -> Path:
        return self.path / names.TLS_KEY_FILE

    @property
    def client_ca(self) -> Path:
        return self.path / names.CLIENT_CA_BUNDLE_KEY

    @property
    def host_ca_cert(self) -> Path:
        return self.path / names.HOST_CA_CERT_FILE

    @property
    def host_ca_key(self) -> Path:
        return self.path / names.HOST_CA_KEY_FILE

    def host_ca(self, node: str, now: datetime.datetime) -> tuple[HostCA, bool]:
        """The Host's client CA from its files, made (key) or re-issued (certificate, same key)
        when missing or unfit; and whether its certificate changed (EA-126)."""
        private_dir(self.path)  # EA-125
        key: Any = None
        with contextlib.suppress(OSError, ValueError, TypeError):
            key = serialization.load_pem_private_key(self.host_ca_key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            key = new_key()
            write_atomic(self.host_ca_key, key_pem(key), mode=0o600)
            log.info("Made the Host's client CA key", extra={"path": str(self.host_ca_key)})
        cert: x509.Certificate | None = None
        with contextlib.suppress(OSError, ValueError):
            cert = x509.load_pem_x509_certificate(self.host_ca_cert.read_bytes())
        if cert is not None and HostCA(key, cert).fit(node, now):
            return HostCA(key, cert), False
        ca = HostCA.self_signed(key, node, now)
        write_atomic(self.host_ca_cert, ca.cert_pem)
        log.info(
            "Issued the Host's client CA certificate",
            extra={"not_after": ca.cert.not_valid_after_utc.isoformat()},
        )
        return ca, True

    def write(self, key_pem: bytes, chain_pem: bytes, client_ca_pem: str) -> None:
        """Key first (0600), then the client CAs, then the certificate last: flintlockd starts
        (and restarts) on `tls.crt`, by which time the key and CAs are in place."""
        private_dir(self.path)  # EA-125
        write_atomic(self.key, key_pem, mode=0o600)
        write_atomic(self.client_ca, client_ca_pem.encode())
        write_atomic(self.cert, chain_pem)

    def write_client_ca(self, client_ca_pem: str) -> bool:
        data = client_ca_pem.encode()
        with contextlib.suppress(OSError):
            if self.client_ca.read_bytes() == data:
                return False
        private_dir(self.path)  # EA-125
        write_atomic(self.client_ca, data)
        return True

    def read(self) -> tuple[ec.EllipticCurvePrivateKey, bytes] | None:
        """The key and chain on the Host, if both are there and the key is an EC key."""
        try:
            key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
            chain = self.cert.read_bytes()
        except (OSError, ValueError, TypeError):
            return None
        return (key, chain) if isinstance(key, ec.EllipticCurvePrivateKey) else None
