"""Tests of the fake battery's Host rules: flintlockd versions and HostTLS settings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from batteryop.testing.fake_battery.hosts import (
    MIN_FLINTLOCK_VERSION,
    FlintlockVersionError,
    HostConfig,
    HostConnection,
    HostTLSConfig,
    parse_version,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd


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


async def test_a_new_connection_to_a_host_that_came_back_answers_at_once() -> None:
    """Each HostConnection has its own gRPC connections, as the real battery's grpc-go
    ClientConns do: one that saw the Host down (and waits out its reconnect backoff) does not
    make a new one, dialled once the Host is up again, fail with its last error."""
    async with FakeFlintlockd.start(address="127.0.0.1") as flintlockd:
        config = HostConfig(name="host-a", address=flintlockd.target)
        old = HostConnection(config, datetime.now(UTC))
        old.dial()
        try:
            await old.check_version(5)
            await flintlockd.go_down()
            with pytest.raises(FlintlockVersionError, match="UNAVAILABLE"):
                await old.check_version(5)  # the old connection is now in its backoff
            await flintlockd.come_up()
            new = HostConnection(config, datetime.now(UTC))
            new.dial()
            try:
                assert await new.check_version(5)  # its version, at the first call
            finally:
                await new.close()
        finally:
            await old.close()
