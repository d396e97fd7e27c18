"""`/run/battery/host.env`: the Host's settings, checked, with what follows from them.

`host.conf` is read with `batteryop.hostconf.parse` (HI-050): parsed, never sourced; unknown keys
skipped; an absent file means every default (HI-051); an invalid value refused with its key and
rule. The result is written as `KEY=value` lines that both systemd's `EnvironmentFile=` and the
scripts' reader take as they are: lists are comma-joined without spaces, and every value has
passed its key's rule, so none holds a space, a quote or a `$`.

Besides the keys, the file carries what the network script and dnsmasq need (HI-030, HI-031,
HI-037): the gateway (the subnet's first address, on the bridge), the prefix length, the DHCP
range (the rest of the subnet but its broadcast address), and each CIDR list split into its IPv4
and IPv6 parts for the nftables sets.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

from batteryop import hostconf

LIST_KEYS = ("PROTECTED_CIDRS", "FLINTLOCKD_CLIENT_CIDRS")
"""The CIDR lists, written whole and split by family (`<KEY>4`, `<KEY>6`)."""


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def derived(values: Mapping[str, str]) -> dict[str, str]:
    """Every key's value normalised, plus the guest network's addresses and the split lists."""
    out = {name: ",".join(_items(value)) for name, value in values.items()}
    subnet = ipaddress.IPv4Network(values["GUEST_SUBNET"], strict=True)
    hosts = list(_first_and_last_host(subnet))
    out["GUEST_GATEWAY"] = str(hosts[0])  # HI-030: the bridge holds the subnet's first address
    out["GUEST_PREFIX_LEN"] = str(subnet.prefixlen)
    out["GUEST_DHCP_FIRST"] = str(hosts[0] + 1)  # HI-031: the rest is leased to MicroVMs
    out["GUEST_DHCP_LAST"] = str(hosts[1])
    for key in LIST_KEYS:
        nets = [ipaddress.ip_network(item, strict=True) for item in _items(values[key])]
        out[f"{key}4"] = ",".join(str(n) for n in nets if n.version == 4)
        out[f"{key}6"] = ",".join(str(n) for n in nets if n.version == 6)
    return out


def _first_and_last_host(
    subnet: ipaddress.IPv4Network,
) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    # A /29 or larger (hostconf's rule), so network + 1 and broadcast - 1 are hosts.
    return subnet.network_address + 1, subnet.broadcast_address - 1


def render(values: Mapping[str, str]) -> str:
    """The text of host.env for parsed `host.conf` values."""
    lines = ["# Written at boot by battery-host-config from /etc/battery/host.conf; do not edit.\n"]
    lines.extend(f"{name}={value}\n" for name, value in derived(values).items())
    return "".join(lines)


def read_conf(path: Path) -> str:
    """The file's text, or "" when the Host has none (HI-051)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` whole, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write_host_env(conf: Path, out: Path) -> list[str]:
    """Read `conf`, write `out`; the unknown keys skipped. Raises `hostconf.HostConfError`,
    leaving `out` untouched, when a value is invalid."""
    values, skipped = hostconf.parse(read_conf(conf))
    write_atomically(out, render(values))
    return skipped


def read_env(text: str) -> dict[str, str]:
    """The `KEY=value` lines of an env file we wrote (host.env, versions.env, image.env)."""
    found = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        found[key.strip()] = value.strip().strip('"')
    return found
