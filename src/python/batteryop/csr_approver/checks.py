"""The approval checks: pure functions over a `Request`, its parsed PEM and the `Facts` read
from the cluster (the requester's Node, the address pins). No IO here.

`review` runs the chain in order and returns the first `Failure`, or an `Approval` holding what
signing needs. Each check is a small function whose docstring names its requirement; a failure
names the check (`Failure.check`) and carries the condition reason from
`batteryop.api.conditions.CSRReason`, so the Denied or Failed condition says which check refused
the request (CT-008, CT-013).

The chain, in order:

1. `signer` — one of the three signers (CT-102). `UnknownSignerName`. Then `client-signer` —
   not `flintlockd-client`: those certificates are signed on each Host by its Exec Agent's own
   Host CA (EA-126), so a request for one, whoever makes it, is denied (CT-102).
   `ClientCertificatesSignedOnHost`.
2. `requester` — the Exec Agent's ServiceAccount (CT-010, CT-014).
   `RequesterNotExecAgent`.
3. `requester-node` — exactly one `authentication.kubernetes.io/node-name` extra: the API server
   adds it for a token bound to a Pod on a Node, so it names the requester's own Node.
   `RequesterNodeMissing`.
4. `request` — `spec.request` is one base64 PEM `CERTIFICATE REQUEST` block of at most
   `MAX_REQUEST_BYTES`, it parses, its self-signature holds, and its key is accepted:
   ECDSA on P-256 or P-384, Ed25519, or RSA of 2048 to 8192 bits. Anything else (DSA, other
   curves, short RSA) is refused. `InvalidRequest`. The size bound keeps a request with a huge
   SAN list from costing more than a refusal.
5. `key-usages` — exactly the serving usages (CT-104). `KeyUsagesMismatch`.
6. `subject-alt-names` — no DNS, email, directory or other names; exactly one URI, the expected
   SPIFFE ID for the requester's Node; exactly one IP (CT-010, CT-014).
   `SubjectAltNamesMismatch`.
7. `node` — the requester's Node exists (CT-010, CT-014). `NodeNotFound`.
8. `node-address` — the IP is one of that Node's InternalIP addresses (CT-010, CT-014).
   `SubjectAltNamesMismatch`.
9. `address-pin` — the IP is the one pinned to the Node or, when the Node has no pin, pinned to
   no other Node (CT-015). `AddressPinned`.

Whatever subject the request asks for is ignored: the certificate's subject is the Node (CT-007,
in `signing`).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from batteryop.api import names
from batteryop.api.conditions import CSRReason
from batteryop.csr_approver.request import Request

MAX_REQUEST_BYTES: Final = 16 * 1024
"""Largest PEM accepted: an RSA 8192 request with two SANs is about 2.5 KiB."""

MIN_RSA_BITS: Final = 2048
MAX_RSA_BITS: Final = 8192

SERVING_SIGNERS: Final = frozenset(
    {names.FLINTLOCKD_SERVING_SIGNER, names.EXEC_AGENT_SERVING_SIGNER}
)
"""Signers whose certificates name an address; the only ones the approver signs (CT-102)."""

_PEM_BEGIN: Final = b"-----BEGIN CERTIFICATE REQUEST-----"
_PEM_END: Final = b"-----END CERTIFICATE REQUEST-----"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Failure:
    """A check refused the request: which check, the condition reason, and why."""

    check: str
    reason: CSRReason
    detail: str

    @property
    def message(self) -> str:
        """The condition message: the check's name first."""
        return f"The {self.check} check failed: {self.detail}"


@dataclass(frozen=True)
class NodeFacts:
    """A Node as the checks need it: its name and its InternalIP addresses."""

    name: str
    internal_addresses: tuple[IPAddress, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeFacts:
        meta = obj.get("metadata") or {}
        addresses: list[IPAddress] = []
        for entry in (obj.get("status") or {}).get("addresses") or []:
            if isinstance(entry, Mapping) and entry.get("type") == "InternalIP":
                ip = _ip(str(entry.get("address") or ""))
                if ip is not None:
                    addresses.append(ip)
        return cls(name=str(meta.get("name") or ""), internal_addresses=tuple(addresses))


@dataclass(frozen=True)
class Facts:
    """What the checks know about the cluster.

    `node` is the requester's Node (None: it does not exist, or the request names none);
    `pins` the `host-address-pins` data, Node name to address.
    """

    trust_domain: str
    exec_agent_username: str
    node: NodeFacts | None = None
    pins: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Approval:
    """A request that passed every check, and what signing needs from it."""

    node: str
    csr: x509.CertificateSigningRequest
    uri: str
    ip: IPAddress | None
    pin: bool
    """Whether signing must first pin `ip` to `node` (a serving request of an unpinned Node)."""

    @property
    def subject_alt_names(self) -> list[x509.GeneralName]:
        sans: list[x509.GeneralName] = []
        if self.ip is not None:
            sans.append(x509.IPAddress(self.ip))
        sans.append(x509.UniformResourceIdentifier(self.uri))
        return sans


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def service_account_username(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def expected_uri(signer: str, trust_domain: str, node: str) -> str:
    """The one SPIFFE ID a signer's certificate names for `node` (CT-010, CT-014)."""
    if signer == names.FLINTLOCKD_SERVING_SIGNER:
        return names.spiffe_host_id(trust_domain, node)
    return names.spiffe_exec_agent_id(trust_domain, node)


# -- the checks --------------------------------------------------------------------------------


def check_signer(request: Request) -> Failure | None:
    """CT-102: only the three signers are ours."""
    if request.signer in names.SIGNERS:
        return None
    return Failure(
        "signer", CSRReason.UNKNOWN_SIGNER_NAME, f"signer {request.signer!r} is not served here"
    )


def check_client_signer(request: Request) -> Failure | None:
    """CT-102: no `flintlockd-client` request is ever signed here, whoever asks: a cluster-signed
    client certificate would be trusted by every Host's flintlockd; each Exec Agent signs its own
    with its Host's CA (EA-126), which only its own Host's flintlockd trusts."""
    if request.signer != names.FLINTLOCKD_CLIENT_SIGNER:
        return None
    return Failure(
        "client-signer",
        CSRReason.CLIENT_SIGNED_ON_HOST,
        "flintlockd client certificates are signed on each Host by its Exec Agent's own Host CA "
        "(EA-126), which only that Host's flintlockd trusts; the CSR approver signs none (CT-102)",
    )


def check_requester(request: Request, facts: Facts) -> Failure | None:
    """CT-010, CT-014: the requester is the Exec Agent's ServiceAccount, exactly."""
    if request.username == facts.exec_agent_username:
        return None
    return Failure(
        "requester",
        CSRReason.REQUESTER_NOT_EXEC_AGENT,
        f"requested by {request.username!r}, not by {facts.exec_agent_username!r}",
    )


def requester_node(request: Request) -> str | Failure:
    """The requester's Node: its one node-name extra (CT-010, CT-014)."""
    values = request.extra.get(names.NODE_NAME_EXTRA, ())
    if len(values) == 1 and values[0]:
        return values[0]
    return Failure(
        "requester-node",
        CSRReason.REQUESTER_NODE_MISSING,
        f"the requester's credentials carry {len(values)} {names.NODE_NAME_EXTRA} values, "
        "not exactly one (a token bound to a Pod on a Node carries one)",
    )


def parse_request(request: Request) -> x509.CertificateSigningRequest | Failure:
    """One PEM request block, bounded in size, validly self-signed, with an accepted key."""

    def invalid(detail: str) -> Failure:
        return Failure("request", CSRReason.INVALID_REQUEST, detail)

    if len(request.request_b64) > MAX_REQUEST_BYTES * 4 // 3 + 4:
        return invalid(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
    try:
        pem = base64.b64decode(request.request_b64, validate=True)
    except (binascii.Error, ValueError):
        return invalid("spec.request is not base64")
    if len(pem) > MAX_REQUEST_BYTES:
        return invalid(f"the request is {len(pem)} bytes, more than {MAX_REQUEST_BYTES}")
    if pem.count(b"-----BEGIN") != 1 or not pem.strip().startswith(_PEM_BEGIN):
        return invalid("spec.request is not exactly one PEM CERTIFICATE REQUEST block")
    if not pem.strip().endswith(_PEM_END):
        return invalid("spec.request has data after its PEM block")
    try:
        csr = x509.load_pem_x509_csr(pem)
        signed = csr.is_signature_valid
        key = csr.public_key()
    except (ValueError, TypeError, x509.UnsupportedGeneralNameType) as e:
        return invalid(f"the PEM request does not parse ({type(e).__name__})")
    except Exception as e:  # cryptography raises its own errors for unsupported algorithms
        return invalid(f"the PEM request cannot be read ({type(e).__name__})")
    if not signed:
        return invalid("the request's self-signature does not verify")
    refused = _refused_key(key)
    if refused:
        return invalid(refused)
    return csr


def _refused_key(key: object) -> str | None:
    if isinstance(key, ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1 | ec.SECP384R1):
            return None
        return f"ECDSA curve {key.curve.name} is not accepted (P-256 or P-384 are)"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return None
    if isinstance(key, rsa.RSAPublicKey):
        if MIN_RSA_BITS <= key.key_size <= MAX_RSA_BITS:
            return None
        return f"an RSA key of {key.key_size} bits is not accepted ({MIN_RSA_BITS}..{MAX_RSA_BITS})"
    return f"a {type(key).__name__.removeprefix('_')} key is not accepted"


def check_key_usages(request: Request) -> Failure | None:
    """CT-104: exactly the serving signers' usages, no more, no fewer."""
    want = frozenset(names.SERVING_USAGES)
    if len(request.usages) == len(want) and frozenset(request.usages) == want:
        return None
    return Failure(
        "key-usages",
        CSRReason.KEY_USAGES_MISMATCH,
        f"usages {sorted(request.usages)} are not exactly {sorted(want)}",
    )


def check_subject_alt_names(
    request: Request, csr: x509.CertificateSigningRequest, node: str, trust_domain: str
) -> tuple[str, IPAddress] | Failure:
    """CT-010, CT-014: one SPIFFE URI for the requester's Node and one IP, nothing else.
    Returns (uri, ip)."""

    def mismatch(detail: str) -> Failure:
        return Failure("subject-alt-names", CSRReason.SUBJECT_ALT_NAMES_MISMATCH, detail)

    try:
        ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        general: Sequence[x509.GeneralName] = list(ext.value)
    except x509.ExtensionNotFound:
        general = []
    except Exception as e:  # a malformed or duplicated extension
        return mismatch(f"the subject alternative names cannot be read ({type(e).__name__})")
    uris = [g.value for g in general if isinstance(g, x509.UniformResourceIdentifier)]
    ips = [g.value for g in general if isinstance(g, x509.IPAddress)]
    others = len(general) - len(uris) - len(ips)
    want_uri = expected_uri(request.signer, trust_domain, node)
    if others:
        return mismatch(f"{others} names other than a URI or an IP address are not allowed")
    if uris != [want_uri]:
        shown = uris if len(uris) <= 3 else [*uris[:3], f"... {len(uris)} in all"]
        return mismatch(f"the URIs {shown} are not exactly [{want_uri!r}]")
    if len(ips) != 1 or not isinstance(ips[0], ipaddress.IPv4Address | ipaddress.IPv6Address):
        return mismatch(f"a serving certificate names exactly one IP address, not {len(ips)}")
    return want_uri, ips[0]


def check_node(request: Request, node: str, facts: Facts) -> Failure | None:
    """CT-010, CT-014: the requester's Node exists."""
    if facts.node is not None:
        return None
    return Failure("node", CSRReason.NODE_NOT_FOUND, f"Node {node!r} does not exist")


def check_node_address(ip: IPAddress, node: NodeFacts) -> Failure | None:
    """CT-010, CT-014: the IP is one of the Node's internal addresses."""
    if ip in node.internal_addresses:
        return None
    have = ", ".join(str(a) for a in node.internal_addresses) or "none"
    return Failure(
        "node-address",
        CSRReason.SUBJECT_ALT_NAMES_MISMATCH,
        f"{ip} is not an internal address of Node {node.name!r} (it has {have})",
    )


def check_address_pin(ip: IPAddress, node: str, pins: Mapping[str, str]) -> bool | Failure:
    """CT-015: the Node's pinned address, or (no pin yet) an address no other Node has pinned.

    Returns whether signing must pin the address first (CT-016).
    """
    pinned = pins.get(node)
    if pinned is not None:
        if _ip(pinned) == ip:
            return False
        return Failure(
            "address-pin",
            CSRReason.ADDRESS_PINNED,
            f"Node {node!r} is pinned to {pinned}, not {ip}",
        )
    for other, address in sorted(pins.items()):
        if other != node and _ip(address) == ip:
            return Failure(
                "address-pin",
                CSRReason.ADDRESS_PINNED,
                f"{ip} is pinned to Node {other!r}",
            )
    return True


# -- the chain ---------------------------------------------------------------------------------


def review(request: Request, facts: Facts) -> Approval | Failure:
    """Every check in order; the first failure, or the approval (module docstring)."""
    failure = (
        check_signer(request) or check_client_signer(request) or check_requester(request, facts)
    )
    if failure:
        return failure
    node = requester_node(request)
    if isinstance(node, Failure):
        return node
    csr = parse_request(request)
    if isinstance(csr, Failure):
        return csr
    failure = check_key_usages(request)
    if failure:
        return failure
    sans = check_subject_alt_names(request, csr, node, facts.trust_domain)
    if isinstance(sans, Failure):
        return sans
    uri, ip = sans
    failure = check_node(request, node, facts)
    if failure:
        return failure
    assert facts.node is not None  # check_node: the Node exists
    failure = check_node_address(ip, facts.node)
    if failure:
        return failure
    pin = check_address_pin(ip, node, facts.pins)
    if isinstance(pin, Failure):
        return pin
    return Approval(node=node, csr=csr, uri=uri, ip=ip, pin=pin)
