"""Certificate requests as the Exec Agent makes them, for the CSR approver's tests.

`request_pem` builds a PKCS#10 request with any key and SANs; `csr_body` wraps it in a
CertificateSigningRequest body (certificates.k8s.io/v1). `csr_object` adds what the API server
fills in (requester, extra, conditions), for tests that need no server.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from batteryop.api import names
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def ec_key(curve: ec.EllipticCurve | None = None) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve or ec.SECP256R1())


def general_names(sans: Sequence[str]) -> list[x509.GeneralName]:
    """`spiffe://…` and other URIs, IP addresses, `mail:x@y` emails, and DNS names."""
    out: list[x509.GeneralName] = []
    for san in sans:
        if "://" in san:
            out.append(x509.UniformResourceIdentifier(san))
        elif san.startswith("mail:"):
            out.append(x509.RFC822Name(san.removeprefix("mail:")))
        else:
            try:
                out.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                out.append(x509.DNSName(san))
    return out


def request_pem(key: SigningKey, sans: Sequence[str], *, common_name: str = "exec-agent") -> bytes:
    """A PEM request for `sans`, asking for subject CN=`common_name`, signed by `key`."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(general_names(sans)), critical=False
        )
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM)


def usages_for(signer: str) -> list[str]:
    serving = signer != names.FLINTLOCKD_CLIENT_SIGNER
    return list(names.SERVING_USAGES if serving else names.CLIENT_USAGES)


def csr_body(
    name: str,
    signer: str,
    pem: bytes,
    *,
    usages: Sequence[str] | None = None,
    expiration_seconds: int | None = None,
) -> dict[str, Any]:
    """A CertificateSigningRequest body as the Exec Agent would create it."""
    spec: dict[str, Any] = {
        "signerName": signer,
        "request": base64.b64encode(pem).decode(),
        "usages": list(usages) if usages is not None else usages_for(signer),
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    return {
        "apiVersion": CERTIFICATE_SIGNING_REQUESTS.api_version,
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def csr_object(
    signer: str,
    pem: bytes,
    *,
    username: str,
    extra: Mapping[str, Sequence[str]] | None = None,
    usages: Sequence[str] | None = None,
    conditions: Sequence[str] = (),
    name: str = "csr",
) -> dict[str, Any]:
    """`csr_body` plus what the API server records: requester, extra, and True conditions."""
    body = csr_body(name, signer, pem, usages=usages)
    body["metadata"].update(uid="uid-1", resourceVersion="1")
    body["spec"]["username"] = username
    body["spec"]["extra"] = {k: list(v) for k, v in (extra or {}).items()}
    body["status"] = {"conditions": [{"type": t, "status": "True"} for t in conditions]}
    return body
