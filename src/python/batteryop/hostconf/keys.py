"""The keys of `host.conf`, each with its default and its rule (see the package docstring)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MAX_UID = 4_294_967_294
"""The largest UID a Linux kernel hands out (2**32 - 2; -1 means 'no change')."""

_DEVICE = re.compile(r"/dev/[A-Za-z0-9._/-]+")
_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)")


class HostConfError(ValueError):
    """A `host.conf` value breaks its key's rule; the message names the key and the rule."""

    def __init__(self, key: str, rule: str, line: int | None = None) -> None:
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"host.conf {where}{key}: {rule}")
        self.key = key
        self.rule = rule
        self.line = line


@dataclass(frozen=True)
class Key:
    """One key: its name, its default value (as written in the file), what it means, and a
    check that raises `ValueError` with the rule when a value breaks it."""

    name: str
    default: str
    doc: str
    validate: Callable[[str], None]


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",")] if value.strip() else []


def _guest_subnet(value: str) -> None:
    try:
        network = ipaddress.IPv4Network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"must be an IPv4 network in CIDR form ({err})") from None
    if network.prefixlen > 29:
        raise ValueError("must be a /29 or larger, so a MicroVM's addresses fit")


def _cidrs(value: str) -> None:
    for item in _items(value):
        try:
            ipaddress.ip_network(item, strict=True)
        except ValueError as err:
            raise ValueError(f"must be a comma-separated list of CIDRs ({err})") from None


def _device(value: str) -> None:
    if value and not _DEVICE.fullmatch(value):
        raise ValueError("must be empty (detect an unused instance-store disk) or a /dev/ path")


def _count(value: str) -> None:
    if not value.isdigit():
        raise ValueError("must be a whole number, 0 or more")


def _ports(value: str) -> None:
    for item in _items(value):
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ValueError(f"must be a comma-separated list of ports 1-65535, not {item!r}")


def _uid(value: str) -> None:
    if not value.isdigit() or not 1 <= int(value) <= MAX_UID:
        raise ValueError(f"must be a UID from 1 to {MAX_UID} (never 0, root)")


def _uids(value: str) -> None:
    for item in _items(value):
        _uid(item)


KEYS: Mapping[str, Key] = {
    key.name: key
    for key in (
        Key(
            "GUEST_SUBNET",
            "10.220.0.0/16",
            "the MicroVMs' subnet on the guest bridge",
            _guest_subnet,
        ),
        Key(
            "THIN_POOL_DEVICE",
            "",
            "the disk for containerd's thin pool; empty detects an unused instance-store disk",
            _device,
        ),
        Key(
            "PROTECTED_CIDRS",
            "",
            "networks no MicroVM may reach (the VPC, the cluster's Pod and Service ranges)",
            _cidrs,
        ),
        Key("HOST_RESERVE_VCPU", "2", "vCPUs kept for the Host itself, not for MicroVMs", _count),
        Key("HOST_RESERVE_MEMORY_MB", "4096", "memory (MiB) kept for the Host itself", _count),
        Key(
            "HOST_CONTROL_PORTS",
            "9090,8090,10248,10250,10255,10256,10270,1338",
            "Host ports no MicroVM may reach (flintlockd, kubelet, Exec Agent, metrics)",
            _ports,
        ),
        Key("EXEC_AGENT_UID", "65532", "the UID the Exec Agent runs as (never 0)", _uid),
        Key(
            "GATEWAY_SERVICE_PORTS",
            "",
            "gateway ports MicroVMs may reach (none by default)",
            _ports,
        ),
        Key(
            "GATEWAY_SERVICE_UIDS",
            "",
            "UIDs of the gateway services (never 0 or the Exec Agent's UID)",
            _uids,
        ),
        Key(
            "FLINTLOCKD_CLIENT_CIDRS",
            "",
            "networks allowed to reach flintlockd (the operator Pod's); empty means none",
            _cidrs,
        ),
    )
}

DEFAULTS: Mapping[str, str] = {name: key.default for name, key in KEYS.items()}


def check(values: Mapping[str, str]) -> None:
    """Check every value against its key's rule, and the rules between keys.

    Raises `HostConfError` for the first problem; an unknown key is a problem here.
    """
    for name, value in values.items():
        key = KEYS.get(name)
        if key is None:
            raise HostConfError(name, f"is not a key of host.conf (known: {', '.join(KEYS)})")
        try:
            key.validate(value)
        except ValueError as err:
            raise HostConfError(name, str(err)) from None
    agent = values.get("EXEC_AGENT_UID", DEFAULTS["EXEC_AGENT_UID"])
    if agent in _items(values.get("GATEWAY_SERVICE_UIDS", "")):
        raise HostConfError("GATEWAY_SERVICE_UIDS", "must not include EXEC_AGENT_UID")


def entries(text: str) -> list[tuple[int, str, str]]:
    """Each `KEY=value` line as (line number, key, value), quotes removed; comments and blank
    lines skipped. Nothing is checked but the form of a line (`HostConfError` otherwise)."""
    found = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise HostConfError(line.split("=", 1)[0] or line, "is not a KEY=value line", number)
        value = match["value"].strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        found.append((number, match["key"], value))
    return found


def parse(text: str) -> tuple[dict[str, str], list[str]]:
    """What a Host does with its file: the values it uses (defaults for what the file leaves
    out) and the unknown keys it skipped. Raises `HostConfError` naming the key (and line) of
    an invalid value."""
    given: dict[str, str] = {}
    skipped: list[str] = []
    for number, name, value in entries(text):
        if name not in KEYS:
            skipped.append(name)
            continue
        try:
            KEYS[name].validate(value)
        except ValueError as err:
            raise HostConfError(name, str(err), number) from None
        given[name] = value
    values = {**DEFAULTS, **given}
    check(values)
    return values, skipped


def render(values: Mapping[str, str]) -> str:
    """The file holding exactly `values`, in the keys' order, after `check`."""
    check(values)
    return "".join(f"{name}={values[name]}\n" for name in KEYS if name in values)


def defaults_file() -> str:
    """`host.conf.defaults`: every key with its default and what it means."""
    lines = ["# host.conf defaults: every key a Host reads, with its default.\n"]
    for key in KEYS.values():
        lines.append(f"# {key.doc}\n{key.name}={key.default}\n")
    return "".join(lines)
