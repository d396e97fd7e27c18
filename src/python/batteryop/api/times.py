"""Kubernetes' wire forms of timestamps and durations, as aware `datetime` and `timedelta`.

- `metav1.Time` (creationTimestamp, conditions' lastTransitionTime, a claim's boundTime and
  leaseExpiresAt) is RFC 3339 in UTC with whole seconds: `format_time`.
- `metav1.MicroTime` (a claim's renewTime and observedRenewTime) keeps microseconds:
  `format_micro_time`.
- Go's `time.RFC3339Nano` (the Exec Agent's drain-started Node annotation) trims trailing zeros
  of the fraction: `format_rfc3339_nano`.
- `metav1.Duration` (a Pool's lease durations) is Go's duration syntax, e.g. `10s`, `1m30s`,
  `1.5h`: `parse_duration` and `format_duration`, which writes what Go's `Duration.String`
  writes, so `parse_duration(format_duration(d)) == d` for every `timedelta` we can hold.

`parse_time` reads any of them (with or without a fraction of up to nine digits, `Z` or an
offset) and always returns an aware UTC `datetime`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

from batteryop.api._compat import UTC

_RFC3339 = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d{1,9}))?(?P<tz>[Zz]|[+-]\d{2}:\d{2})$"
)

# Go's time.ParseDuration: an optional sign, then one or more decimal numbers with a unit.
_DURATION = re.compile(r"^[-+]?(?:0|(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+)$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_MICROSECONDS = {
    "ns": Decimal("0.001"),
    "us": Decimal(1),
    "µs": Decimal(1),  # U+00B5, as Go writes it
    "μs": Decimal(1),  # U+03BC, which Go also reads
    "ms": Decimal(1_000),
    "s": Decimal(1_000_000),
    "m": Decimal(60_000_000),
    "h": Decimal(3_600_000_000),
}


def parse_time(value: str) -> datetime:
    """An RFC 3339 timestamp as an aware UTC datetime; fractions beyond microseconds drop."""
    m = _RFC3339.match(value)
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    frac = (m["frac"] or "").ljust(6, "0")[:6]
    tz = "+00:00" if m["tz"] in ("Z", "z") else m["tz"]
    parsed = datetime.fromisoformat(f"{m['date']}T{m['time']}.{frac}{tz}")
    return parsed.astimezone(UTC)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"a Kubernetes timestamp needs a timezone: {value!r}")
    return value.astimezone(UTC)


def format_time(value: datetime) -> str:
    """`metav1.Time`: UTC, whole seconds (a fraction is dropped, as Kubernetes drops it)."""
    return _utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """`metav1.MicroTime`: UTC with six fractional digits."""
    return _utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_rfc3339_nano(value: datetime) -> str:
    """Go's `time.RFC3339Nano` in UTC: the fraction without trailing zeros, none when whole
    (a `datetime` holds microseconds, so at most six digits)."""
    utc = _utc(value)
    fraction = f"{utc.microsecond:06d}".rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def truncate_to_seconds(value: datetime) -> datetime:
    """`value` without its fraction: what survives a round trip through `metav1.Time`."""
    return _utc(value).replace(microsecond=0)


def parse_duration(value: str) -> timedelta:
    """A Go duration string as a timedelta (nanoseconds round down to microseconds)."""
    if not _DURATION.match(value):
        raise ValueError(f"not a duration: {value!r}")
    sign = -1 if value.startswith("-") else 1
    total = sum(
        (
            Decimal(number) * _UNIT_MICROSECONDS[unit]
            for number, unit in _DURATION_PART.findall(value)
        ),
        Decimal(0),
    )
    return timedelta(microseconds=sign * int(total))


def _decimal(whole: int, fraction: int, digits: int) -> str:
    text = str(whole)
    if fraction:
        text += "." + str(fraction).rjust(digits, "0").rstrip("0")
    return text


def format_duration(value: timedelta) -> str:
    """A timedelta in Go's `Duration.String` form: `0s`, `500ms`, `10s`, `1m30s`, `1h0m0s`."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros < 1_000:
        return f"{sign}{micros}µs"
    if micros < 1_000_000:
        return f"{sign}{_decimal(micros // 1_000, micros % 1_000, 3)}ms"
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds = _decimal(rest // 1_000_000, rest % 1_000_000, 6) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return f"{sign}{seconds}"
