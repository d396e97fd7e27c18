"""install.yaml's cert-manager objects: the three CAs and battery's flintlockd client certificate.

cert-manager must be installed in the cluster first: these are its custom resources
(`cert-manager.io/v1`), and its controller issues the Secrets they name. In apply order, all in
the Operator namespace:

- Issuer `names.SELFSIGNED_ISSUER`: self-signs the CA certificates.
- Certificate `names.SERVING_CA_SECRET`: the serving CA (CT-021). The CSR approver signs
  flintlockd's serving certificates with it.
- Certificate `names.EXEC_AGENT_SERVING_CA_SECRET`: the Exec Agents' serving CA (CT-106). The
  CSR approver signs the Exec Agents' exec API serving certificates with it and nothing else
  (CT-101): clients trust only it for an Exec Agent.
- Certificate `names.CLIENT_CA_SECRET`: the client CA (CT-021). cert-manager signs battery's
  flintlockd client certificate with it; nothing else does (each Exec Agent signs its own with
  its Host's CA, EA-126).
  Every CA: `isCA`, ECDSA P-256, ten years (`CA_DURATION`), and `rotationPolicy: Never`: the
  key is made once and kept, so a re-issued CA still verifies what the old one signed.
- Issuer `names.CLIENT_CA_ISSUER`: a CA Issuer on the client CA's Secret.
- Certificate `names.BATTERY_CLIENT_SECRET`: battery's flintlockd client certificate, from the
  client CA (CT-023). Its only SAN is the URI `spiffe://<trust domain>/flintlock/client/battery`
  (no common name, no DNS name), ECDSA P-256, 90 days renewed 30 days before expiry, a new key
  at every renewal (`rotationPolicy: Always`), usages digital signature, key encipherment and
  client auth. The Operator Pod mounts it as a projected volume (DP-005); the host registry
  restarts battery when it is renewed (DP-007).

Who may read the Secrets (CT-022) is the RBAC's business (`csr_approver`, `rbac`): of the
identities install.yaml creates, only the CSR approver reads the three CA Secrets, and none reads
battery's client Secret through the API (the kubelet mounts it into the Operator Pod).

Requirements: CT-021, CT-023, CT-106.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from batteryop.api import names
from batteryop.manifests import rbac

Obj = dict[str, Any]

COMPONENT: Final = "certificates"
"""`app.kubernetes.io/component` of the cert-manager objects."""
GROUP: Final = "cert-manager.io"
"""cert-manager's API group."""
API_VERSION: Final = f"{GROUP}/v1"

CA_DURATION: Final = "87600h"
"""Lifetime of the CA certificates: ten years."""
CLIENT_DURATION: Final = "2160h"
"""Lifetime of battery's client certificate: 90 days."""
CLIENT_RENEW_BEFORE: Final = "720h"
"""battery's client certificate is renewed 30 days before it expires."""
KEY_ALGORITHM: Final = "ECDSA"
KEY_SIZE: Final = 256


def _issuer_ref(name: str) -> Obj:
    return {"name": name, "kind": "Issuer", "group": GROUP}


def _private_key(rotation: str) -> Obj:
    return {"algorithm": KEY_ALGORITHM, "size": KEY_SIZE, "rotationPolicy": rotation}


def issuer(name: str, namespace: str, labels: Mapping[str, str], spec: Obj) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "Issuer",
        "metadata": rbac.meta(name, labels, namespace),
        "spec": spec,
    }


def ca_certificate(name: str, namespace: str, labels: Mapping[str, str]) -> Obj:
    """A self-signed CA certificate, its Secret named as it is (CT-021)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Certificate",
        "metadata": rbac.meta(name, labels, namespace),
        "spec": {
            "isCA": True,
            "commonName": name,
            "secretName": name,
            "duration": CA_DURATION,
            "privateKey": _private_key("Never"),  # the CA key is kept across re-issues
            "issuerRef": _issuer_ref(names.SELFSIGNED_ISSUER),
        },
    }


def battery_client_certificate(
    namespace: str, labels: Mapping[str, str], trust_domain: str = names.DEFAULT_TRUST_DOMAIN
) -> Obj:
    """battery's flintlockd client certificate from the client CA, one SPIFFE URI (CT-023)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Certificate",
        "metadata": rbac.meta(names.BATTERY_CLIENT_SECRET, labels, namespace),
        "spec": {
            "secretName": names.BATTERY_CLIENT_SECRET,
            "uris": [names.spiffe_battery_client_id(trust_domain)],  # CT-023: its only SAN
            "duration": CLIENT_DURATION,
            "renewBefore": CLIENT_RENEW_BEFORE,
            "privateKey": _private_key("Always"),
            "usages": list(names.CLIENT_USAGES),
            "issuerRef": _issuer_ref(names.CLIENT_CA_ISSUER),
        },
    }


def objects(
    namespace: str, labels: Mapping[str, str], trust_domain: str = names.DEFAULT_TRUST_DOMAIN
) -> list[Obj]:
    """The Issuers and Certificates, each Issuer before the Certificates that name it."""
    return [
        issuer(names.SELFSIGNED_ISSUER, namespace, labels, {"selfSigned": {}}),
        ca_certificate(names.SERVING_CA_SECRET, namespace, labels),  # CT-021
        ca_certificate(names.CLIENT_CA_SECRET, namespace, labels),  # CT-021
        ca_certificate(names.EXEC_AGENT_SERVING_CA_SECRET, namespace, labels),  # CT-106
        issuer(
            names.CLIENT_CA_ISSUER,
            namespace,
            labels,
            {"ca": {"secretName": names.CLIENT_CA_SECRET}},
        ),
        battery_client_certificate(namespace, labels, trust_domain),  # CT-023
    ]
