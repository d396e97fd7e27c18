"""Which Nodes are Hosts, at which flintlockd address, and which are cordoned: pure functions.

A Node is a Host (IN-001) while all of these hold:

- it is labelled as a Host (`names.HOST_LABEL` = `names.HOST_LABEL_VALUE`, the label the Exec
  Agent's DaemonSet selects on, so a Node without it has no agent to vouch for it);
- it is not being deleted;
- its Exec Agent report says ready (`names.EXEC_AGENT_READY_ANNOTATION` = `"true"`), and its
  own Ready condition, when it has one, is True (IN-110: an agent still running on a Host whose
  kubelet or container runtime died cannot vouch for it);
- the report names a valid flintlockd address (`names.FLINTLOCKD_ADDRESS_ANNOTATION`): an IP
  address (IPv6 in brackets) and a port, `host:port`. Anything else is refused with a reason
  and never reaches battery's config (IN-103: an address battery cannot dial would only make
  it log errors, and a name would let DNS pick the Host);
- that address's IP is one of the Node's own InternalIP addresses (`status.addresses`, which
  the kubelet writes and the Exec Agent cannot: EA-051 confines it to annotations), so an
  agent cannot point battery at another Host's flintlockd (IN-108);
- no other Node's report names the same IP (`admit_all`, IN-109). When several do, the one
  battery already has at that address keeps it and the others are refused; when battery has
  none of them, all are refused until one report changes.

Each refusal of an address (`ADDRESS_REFUSALS`) is the reason of a Warning Event on the Node
(the controller posts it once per address) and of a log line, with `Admission.detail` saying
what to fix.

battery reaches the Host under the Node's name at that address (IN-003). A cordoned Node
(`spec.unschedulable`) stays a Host battery knows but is cordoned in battery (IN-100, instead
of removing it with a restart as IN-002 would); it is left out of the Host set the Pool controller
places Pools on, which is what IN-001 asks of an unschedulable Node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, TypeAlias

from batteryop.api import names
from batteryop.api.conditions import node_readiness

IP: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refusal(StrEnum):
    """Why a Node is not a Host (also the Event reason for an invalid address)."""

    NOT_LABELLED = "NotLabelledAsHost"
    DELETING = "NodeDeleting"
    NOT_READY = "ReportNotReady"
    NODE_NOT_READY = "NodeNotReady"
    NO_ADDRESS = "NoFlintlockdAddress"
    INVALID_ADDRESS = "InvalidFlintlockdAddress"
    ADDRESS_NOT_ON_NODE = "FlintlockdAddressNotOnNode"
    ADDRESS_IN_USE = "FlintlockdAddressInUse"


INVALID_ADDRESS_EVENT_REASON: Final = str(Refusal.INVALID_ADDRESS)
"""The reason of the Warning Event recorded on a Node whose report names a bad address."""
ADDRESS_REFUSALS: Final = frozenset(
    {Refusal.INVALID_ADDRESS, Refusal.ADDRESS_NOT_ON_NODE, Refusal.ADDRESS_IN_USE}
)
"""The refusals of a report's address: each is posted as a Warning Event with its reason."""


@dataclass(frozen=True)
class Admission:
    """The verdict on one Node: a Host at `address`, or refused with `refusal` and `detail`."""

    name: str
    address: str | None = None
    cordoned: bool = False
    refusal: Refusal | None = None
    detail: str = ""

    @property
    def is_host(self) -> bool:
        return self.address is not None


class AddressError(ValueError):
    """A flintlockd address that is not `IP:port`; the message says which rule it breaks."""


def check_address(value: str) -> str:
    """`value` as battery is given it, if it is `IPv4:port` or `[IPv6]:port`; else AddressError.

    The port is 1..65535; the IP may not be unspecified (0.0.0.0, ::) or multicast.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise AddressError(f"{value!r} is not host:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"{value!r} has no port between 1 and 65535")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise AddressError(f"{value!r} does not name an IP address") from None
    if ip.version == 6 and not bracketed:
        raise AddressError(f"{value!r}: write an IPv6 address as [address]:port")
    if ip.version == 4 and bracketed:
        raise AddressError(f"{value!r}: only IPv6 addresses go in brackets")
    if ip.is_unspecified or ip.is_multicast:
        raise AddressError(f"{value!r} is not the address of one Host")
    return value


def address_ip(address: str) -> IP:
    """The IP of an address `check_address` accepted."""
    host = address.rpartition(":")[0]
    return ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)


def internal_ips(node: Mapping[str, Any]) -> list[IP]:
    """The Node's InternalIP addresses, as its kubelet reports them (unparseable ones left out)."""
    found: list[IP] = []
    for entry in (node.get("status") or {}).get("addresses") or []:
        if isinstance(entry, Mapping) and entry.get("type") == "InternalIP":
            try:
                found.append(ipaddress.ip_address(str(entry.get("address"))))
            except ValueError:
                continue
    return found


def admit(node: Mapping[str, Any]) -> Admission:
    """The verdict on `node` (a Node object as the API returns it). IN-001..IN-003, IN-108."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    if labels.get(names.HOST_LABEL) != names.HOST_LABEL_VALUE:
        return Admission(name, refusal=Refusal.NOT_LABELLED)
    if meta.get("deletionTimestamp"):
        return Admission(name, refusal=Refusal.DELETING)  # IN-002
    if annotations.get(names.EXEC_AGENT_READY_ANNOTATION) != names.EXEC_AGENT_READY_TRUE:
        return Admission(name, refusal=Refusal.NOT_READY)  # IN-001, IN-002
    readiness = node_readiness(node)
    if readiness is not None and not readiness.ready:  # IN-110
        return Admission(
            name,
            refusal=Refusal.NODE_NOT_READY,
            detail=f"its Ready condition is {readiness.status} ({readiness.reason})",
        )
    raw = annotations.get(names.FLINTLOCKD_ADDRESS_ANNOTATION)
    if not raw:
        return Admission(name, refusal=Refusal.NO_ADDRESS)
    try:
        address = check_address(str(raw))
    except AddressError as e:
        return Admission(name, refusal=Refusal.INVALID_ADDRESS, detail=str(e))
    own = internal_ips(node)
    if address_ip(address) not in own:  # IN-108
        listed = ", ".join(str(ip) for ip in own) or "none"
        return Admission(
            name,
            refusal=Refusal.ADDRESS_NOT_ON_NODE,
            detail=f"{address!r}, which is not one of the Node's InternalIP addresses ({listed})",
        )
    return Admission(name, address=address, cordoned=cordoned)  # IN-003


def admit_all(
    nodes: Mapping[str, Mapping[str, Any]], held: Mapping[str, str] = {}
) -> dict[str, Admission]:
    """The verdict on every Node, by name: `admit`, then no two Hosts at one IP (IN-109).

    `held` is what battery has (Host name -> address): of the Nodes whose reports name one IP,
    the one battery already has at that address stays a Host; the others are refused."""
    verdicts = {name: admit(node) for name, node in nodes.items()}
    by_ip: dict[IP, list[str]] = {}
    for name, a in verdicts.items():
        if a.address is not None:
            by_ip.setdefault(address_ip(a.address), []).append(name)
    for ip, claimants in by_ip.items():
        if len(claimants) < 2:
            continue
        keepers = sorted(n for n in claimants if held.get(n) == verdicts[n].address)
        keeper = keepers[0] if keepers else None
        for name in claimants:
            if name == keeper:
                continue
            others = ", ".join(sorted(n for n in claimants if n != name))
            verdicts[name] = Admission(
                name,
                refusal=Refusal.ADDRESS_IN_USE,
                detail=(
                    f"{verdicts[name].address!r}, whose IP {ip} the report of Node {others} "
                    f"also names{' (battery has it there)' if keeper else ''}"
                ),
            )
    return verdicts
