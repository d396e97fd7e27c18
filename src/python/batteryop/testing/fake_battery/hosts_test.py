"""Tests of the fake battery's Host rules: flintlockd versions and HostTLS settings."""

from __future__ import annotations

import pytest

from batteryop.testing.fake_battery.hosts import MIN_FLINTLOCK_VERSION, HostTLSConfig, parse_version


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("v0.15.2", (0, 15, 2)),
        ("0.16.0", (0, 16, 0)),
        ("v0.15.2-3-gabc1234", (0, 15, 2)),
        ("v0.15.1", (0, 15, 1)),
        ("undefined", None),
        ("", None),
    ],
)
def test_parse_version(text: str, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


def test_minimum_is_v0_15_2() -> None:
    assert MIN_FLINTLOCK_VERSION == (0, 15, 2)
    assert parse_version("v0.15.2-9-gdeadbee") == MIN_FLINTLOCK_VERSION


@pytest.mark.parametrize(
    ("tls", "ok"),
    [
        (HostTLSConfig(insecure=True), True),
        (HostTLSConfig(insecure=True, ca_file="ca"), False),
        (HostTLSConfig(insecure=False), False),
        (HostTLSConfig(insecure=False, ca_file="ca"), True),
        (HostTLSConfig(insecure=False, ca_file="ca", cert_file="c"), False),
        (HostTLSConfig(insecure=False, ca_file="ca", cert_file="c", key_file="k"), True),
    ],
)
def test_host_tls_rules(tls: HostTLSConfig, ok: bool) -> None:
    assert (tls.problem() is None) == ok
