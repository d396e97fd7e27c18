"""kubeadm's side of a join (`kubeadm`): the token, the CA pin, the files kubeadm writes, and
which kubelet serving requests the harness approves."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from batteryop.testing.kubenode import kubeadm
from batteryop.tls import CertificateAuthority

NODES = {"batteryop-node": "10.89.0.2", "batteryop-node-2": "10.89.0.3"}


def serving_request(
    user: str = "system:node:batteryop-node",
    dns: tuple[str, ...] = ("batteryop-node",),
    ips: tuple[str, ...] = ("10.89.0.2",),
    signer: str = kubeadm.SERVING_SIGNER,
) -> dict[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)])
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {
        "spec": {"signerName": signer, "username": user, "request": base64.b64encode(pem).decode()}
    }


@pytest.mark.req("TD-119")
def test_a_nodes_own_serving_request_is_approvable() -> None:
    assert kubeadm.approvable(serving_request(), NODES) is None


@pytest.mark.req("TD-119")
@pytest.mark.parametrize(
    ("request_", "why"),
    [
        (serving_request(user="system:node:stranger"), "not by one of the harness's Nodes"),
        (serving_request(user="system:serviceaccount:x:y"), "not by one of the harness's Nodes"),
        (serving_request(ips=("10.89.0.3",)), "are not batteryop-node's own"),
        (serving_request(dns=("batteryop-node-2",)), "are not batteryop-node's own"),
        (serving_request(signer="kubernetes.io/kube-apiserver-client"), "is not"),
        (serving_request(dns=(), ips=()), "no subject alternative names"),
    ],
)
def test_a_request_for_another_name_identity_or_signer_is_not(
    request_: dict[str, Any], why: str
) -> None:
    reason = kubeadm.approvable(request_, NODES)
    assert reason is not None and why in reason


def test_a_token_has_kubeadms_form() -> None:
    tokens = {kubeadm.new_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", t) for t in tokens)


def test_the_ca_pin_is_the_sha256_of_its_public_key_info() -> None:
    ca = CertificateAuthority.create("pin-test")
    cert = x509.load_pem_x509_certificate(ca.cert_pem)
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pin = kubeadm.ca_cert_hash(ca.cert_pem)
    assert pin == "sha256:" + hashlib.sha256(der).hexdigest()
    assert pin != kubeadm.ca_cert_hash(CertificateAuthority.create("other").cert_pem)


@pytest.mark.req("TD-118")
def test_only_the_named_preflight_checks_are_skipped() -> None:
    assert set(kubeadm.PREFLIGHT_SKIPPED) == {"SystemVerification"}
    assert all(len(why) > 20 for why in kubeadm.PREFLIGHT_SKIPPED.values())
