"""Parsing of bind-address flags (`--health-probe-bind-address`, `--metrics-bind-address`).

The flags keep controller-runtime's syntax: ``host:port`` with an optional host
(``:8081`` listens on every interface), IPv6 hosts in brackets (``[::1]:9090``), and the
single value ``0`` disabling the listener. Port ``0`` after a host (``127.0.0.1:0``) asks the
kernel for a free port, which tests use.
"""

from __future__ import annotations

import ipaddress
import re

DISABLED = "0"

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def parse_bind_address(value: str, *, flag: str | None = None) -> tuple[str, int] | None:
    """``(host, port)`` for a bind-address flag value, or ``None`` when it is ``"0"`` (disabled).

    `host` is ``""`` for "every interface" (``:8081``); IPv6 hosts come without brackets.
    Raises `ValueError` naming the value (and `flag`, when given) if it is not
    ``[host]:port`` with a port in 0..65535.
    """
    if value == DISABLED:
        return None
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise _invalid(value, flag, 'expected "[host]:port" or "0" to disable')
    if host.startswith("[") or host.endswith("]"):
        host = _bracketed_ipv6(value, flag, host)
    elif ":" in host:
        raise _invalid(value, flag, "an IPv6 host must be in brackets, as in [::1]:8080")
    elif host and not _is_host(host):
        raise _invalid(value, flag, f"{host!r} is not an IP address or host name")
    if not (port_text.isascii() and port_text.isdigit()):
        raise _invalid(value, flag, f"port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535:
        raise _invalid(value, flag, f"port {port} is out of range 0-65535")
    return host, port


def _bracketed_ipv6(value: str, flag: str | None, host: str) -> str:
    if not (host.startswith("[") and host.endswith("]")):
        raise _invalid(value, flag, "unbalanced brackets around the host")
    inner = host[1:-1]
    try:
        ipaddress.IPv6Address(inner)
    except ValueError:
        raise _invalid(value, flag, f"{inner!r} is not an IPv6 address") from None
    return inner


def _is_host(host: str) -> bool:
    if re.fullmatch(r"[0-9.]+", host):  # looks like IPv4, so it must be one
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    return _HOSTNAME.fullmatch(host) is not None


def _invalid(value: str, flag: str | None, why: str) -> ValueError:
    name = f"{flag}={value!r}" if flag else repr(value)
    return ValueError(f"invalid bind address {name}: {why}")
