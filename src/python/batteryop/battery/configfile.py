"""battery's own config file (poolmgrd v0.4.0's JSON schema), rendered and read in one place.

The Manifests ship it with no Host (`install.yaml`'s ConfigMap); the host registry rewrites it
with the Hosts it admits (DP-004, IN-003, IN-004). Both render it here, so the same Host set
always gives the same bytes: Hosts sorted by name, keys sorted, two-space indent, one final
newline.

- `api_server`: battery's gRPC API, plaintext on loopback (DP-001).
- `hosts[]`: `name` (the Node's name), `address` (the flintlockd `host:port` of the Node
  report) and `tls` naming battery's flintlockd client certificate, its key and the CA that
  verifies the Hosts' serving certificates (IN-004, DP-005).
- With no Host the file holds the placeholder `NO_HOSTS_NAME` at `NO_HOSTS_ADDRESS`:
  poolmgrd refuses an empty `hosts` list, and `.invalid` never resolves (RFC 2606).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

DEFAULT_API_ADDRESS: Final = "127.0.0.1:50051"
"""battery's gRPC API: loopback only (DP-001, DP-010)."""
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1:9090"
"""battery's metrics, on loopback too."""
DEFAULT_TLS_DIR: Final = "/etc/battery/tls"
"""Where battery's container mounts its flintlockd client certificate and the serving CA."""
TLS_CERT_FILE: Final = "tls.crt"
TLS_KEY_FILE: Final = "tls.key"
SERVING_CA_FILE: Final = "serving-ca.crt"

NO_HOSTS_NAME: Final = "_no-hosts"
"""Placeholder Host while there is none (poolmgrd refuses an empty list)."""
NO_HOSTS_ADDRESS: Final = "no-hosts.invalid:9090"
"""Address of the placeholder Host; `.invalid` never resolves (RFC 2606)."""


class ConfigFileError(ValueError):
    """battery's config text cannot be read as poolmgrd's schema; names the field."""


def host_tls(tls_dir: str = DEFAULT_TLS_DIR) -> dict[str, str]:
    """The `tls` of every Host: battery's client certificate and key, and the serving CA
    (IN-004: verify the Host, present the Operator's client certificate)."""
    return {
        "cert_file": f"{tls_dir}/{TLS_CERT_FILE}",
        "key_file": f"{tls_dir}/{TLS_KEY_FILE}",
        "ca_file": f"{tls_dir}/{SERVING_CA_FILE}",
    }


def render(
    hosts: Mapping[str, str],
    *,
    api_address: str = DEFAULT_API_ADDRESS,
    metrics_address: str = DEFAULT_METRICS_ADDRESS,
    tls_dir: str = DEFAULT_TLS_DIR,
) -> dict[str, Any]:
    """The config with `hosts` (Node name -> flintlockd address), or the placeholder."""
    entries = dict(hosts) or {NO_HOSTS_NAME: NO_HOSTS_ADDRESS}
    return {
        "api_server": {"addr": api_address, "tls": {"insecure": True}},
        "metrics_addr": metrics_address,
        "hosts": [
            {"name": name, "address": entries[name], "tls": host_tls(tls_dir)}
            for name in sorted(entries)
        ],
    }


def render_text(
    hosts: Mapping[str, str],
    *,
    api_address: str = DEFAULT_API_ADDRESS,
    metrics_address: str = DEFAULT_METRICS_ADDRESS,
    tls_dir: str = DEFAULT_TLS_DIR,
) -> str:
    """`render` as the ConfigMap holds it: the same Hosts give the same bytes."""
    body = render(hosts, api_address=api_address, metrics_address=metrics_address, tls_dir=tls_dir)
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def hosts_of(text: str) -> dict[str, str]:
    """The Hosts (name -> address) a config text gives battery, the placeholder left out."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigFileError(f"config: not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ConfigFileError("config: must be a JSON object")
    hosts = body.get("hosts") or []
    if not isinstance(hosts, list):
        raise ConfigFileError("config: hosts must be a list")
    out: dict[str, str] = {}
    for i, host in enumerate(hosts):
        if not isinstance(host, dict):
            raise ConfigFileError(f"config: hosts[{i}] must be an object")
        name, address = host.get("name"), host.get("address")
        if not isinstance(name, str) or not name or not isinstance(address, str) or not address:
            raise ConfigFileError(f"config: hosts[{i}] needs a name and an address")
        if name != NO_HOSTS_NAME:
            out[name] = address
    return out
