"""How to reach battery: address, deadlines, TLS, token, reconnect policy.

`BatteryConfig` is built once by an entry point (from flags or environment) and checked on
construction, so a bad value fails at start with an error naming the field
(`BatteryConfigError.field`) instead of at the first call.

Requirements: DP-010 (a deadline on every unary call, loopback address), DP-013 (`ClaimVM`
has its own deadline).
"""

from __future__ import annotations

import base64
import ipaddress
import random
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

from batteryop.api.backoff import Backoff
from batteryop.battery.errors import BatteryConfigError

TokenScheme = Literal["basic", "bearer"]

# DP-010 / DP-013: the operator's defaults for its --battery-call-timeout and
# --battery-claim-timeout flags.
DEFAULT_CALL_TIMEOUT = timedelta(seconds=10)
DEFAULT_CLAIM_TIMEOUT = timedelta(minutes=2)

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


@dataclass(frozen=True)
class ReconnectPolicy:
    """Exponential backoff between attempts to (re)open a stream, and for the channel.

    The n-th wait (n counting from 0) is `min(maximum, initial * multiplier**n)`, scaled by a
    random factor in `[1 - jitter, 1 + jitter]` and capped at `maximum` again, so several
    clients restarted together do not retry in step.
    """

    initial: timedelta = timedelta(seconds=1)
    maximum: timedelta = timedelta(seconds=30)
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial <= timedelta(0):
            raise BatteryConfigError("reconnect.initial", "must be positive")
        if self.maximum < self.initial:
            raise BatteryConfigError("reconnect.maximum", "must not be below reconnect.initial")
        if self.multiplier < 1.0:
            raise BatteryConfigError("reconnect.multiplier", "must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise BatteryConfigError("reconnect.jitter", "must be between 0 and 1")

    def backoff(self, rng: random.Random | None = None) -> Backoff:
        """The policy as the shared `Backoff` (its jitter drawn from `rng`)."""
        return Backoff(
            self.initial.total_seconds(),
            self.maximum.total_seconds(),
            factor=self.multiplier,
            jitter=self.jitter,
            rng=rng,
        )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `attempt` (0 for the first retry)."""
        return self.backoff(rng).delay(attempt)


@dataclass(frozen=True)
class TLSConfig:
    """TLS towards battery. Files are read when the client connects.

    `ca_file` is the CA bundle that verifies battery's serving certificate (unset: the
    system's roots). `cert_file` and `key_file` (both or neither) present a client
    certificate. `server_name` overrides the name checked against the serving certificate
    (and sent as SNI), for a certificate that does not name the dialled address.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "tls.key_file" if self.key_file is None else "tls.cert_file"
            raise BatteryConfigError(missing, "tls.cert_file and tls.key_file go together")
        for name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, name)
            if value is not None and not str(value):
                raise BatteryConfigError(f"tls.{name}", "must not be empty")
        if self.server_name is not None and not self.server_name.strip():
            raise BatteryConfigError("tls.server_name", "must not be empty when set")

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """The CA bundle, the private key and the certificate chain, as PEM bytes."""
        return (
            _read("tls.ca_file", self.ca_file),
            _read("tls.key_file", self.key_file),
            _read("tls.cert_file", self.cert_file),
        )


def _read(name: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise BatteryConfigError(name, f"cannot read {path}: {err.strerror or err}") from err
    if not data.strip():
        raise BatteryConfigError(name, f"{path} is empty")
    return data


@dataclass(frozen=True)
class BatteryConfig:
    """Everything `BatteryClient.connect` needs.

    - `target`: `host:port` (IPv6 as `[::1]:port`) or `unix:/path`. With `require_loopback`
      (the default, DP-010: battery listens on loopback only) the host must be a loopback
      address or `localhost`.
    - `call_timeout`: the deadline of every unary call but `ClaimVM` (DP-010).
    - `claim_timeout`: the deadline of `ClaimVM`, which runs battery's pre-lease hooks
      and may take much longer (DP-013).
    - `tls`: unset means plaintext (the shipped setup: privacy from the loopback binding).
    - `token`: sent on every call as `authorization` metadata; with the `basic` scheme as
      battery's `basic_auth_token` expects it (`basic <base64(token)>`), with `bearer` as
      `Bearer <token>`. Kept out of `repr`.
    - `reconnect`: backoff for the Events stream and the channel's own reconnects.
    - `keepalive_time` / `keepalive_timeout`: HTTP/2 pings on an idle connection, so a
      dead battery is noticed by a long-lived Events stream. `None` turns pings off.
    - `seen_event_ids`: how many event ids a subscription remembers to drop replayed
      duplicates (see `batteryop.battery.events`).
    """

    target: str
    call_timeout: timedelta = DEFAULT_CALL_TIMEOUT
    claim_timeout: timedelta = DEFAULT_CLAIM_TIMEOUT
    tls: TLSConfig | None = None
    token: str | None = field(default=None, repr=False)
    token_scheme: TokenScheme = "basic"
    require_loopback: bool = True
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    keepalive_time: timedelta | None = timedelta(minutes=6)
    keepalive_timeout: timedelta = timedelta(seconds=10)
    seen_event_ids: int = 10_000

    def __post_init__(self) -> None:
        _check_target(self.target, self.require_loopback)
        for name in ("call_timeout", "claim_timeout", "keepalive_timeout"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise BatteryConfigError(name, f"must be a positive timedelta, got {value!r}")
        if self.keepalive_time is not None and self.keepalive_time <= timedelta(0):
            raise BatteryConfigError("keepalive_time", "must be positive, or None to disable")
        if self.token is not None:
            if not self.token or self.token != self.token.strip():
                raise BatteryConfigError("token", "must be non-empty, without surrounding spaces")
            if any(c in self.token for c in "\r\n\0"):
                raise BatteryConfigError("token", "must not contain line breaks or NUL")
        if self.token_scheme not in ("basic", "bearer"):
            raise BatteryConfigError("token_scheme", "must be 'basic' or 'bearer'")
        if self.seen_event_ids < 1:
            raise BatteryConfigError("seen_event_ids", "must be at least 1")

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata carrying the token, if any."""
        if self.token is None:
            return ()
        if self.token_scheme == "basic":
            encoded = base64.b64encode(self.token.encode()).decode()
            return (("authorization", f"basic {encoded}"),)
        return (("authorization", f"Bearer {self.token}"),)


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an IP address, IPv6 without brackets) is this machine's
    loopback: `localhost` and its usual aliases, 127.0.0.0/8, ::1 (DP-010)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_target(target: str, require_loopback: bool) -> None:
    if not isinstance(target, str) or not target.strip():
        raise BatteryConfigError("target", "must be host:port or unix:/path")
    if target.startswith(("unix:", "unix-abstract:")):
        if target.rstrip("/") in ("unix:", "unix-abstract:"):
            raise BatteryConfigError("target", f"{target!r} names no socket")
        return
    host, sep, port = target.rpartition(":")
    if not sep or not host:
        raise BatteryConfigError("target", f"{target!r} is not host:port or unix:/path")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BatteryConfigError("target", f"{target!r} has no valid port")
    if host.startswith("["):
        if not host.endswith("]"):
            raise BatteryConfigError("target", f"{target!r} has an unclosed IPv6 bracket")
        host = host[1:-1]
    elif ":" in host:
        raise BatteryConfigError("target", f"{target!r}: write an IPv6 address as [addr]:port")
    if not require_loopback:
        return
    if not is_loopback_host(host):
        # DP-010: battery is reached at the loopback address only.
        raise BatteryConfigError(
            "target", f"{target!r} is not a loopback address (set require_loopback=False)"
        )
