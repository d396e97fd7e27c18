from __future__ import annotations

import base64
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from batteryop.battery.config import BatteryConfig, ReconnectPolicy, TLSConfig
from batteryop.battery.errors import BatteryConfigError


@pytest.mark.req("DP-010")
@pytest.mark.parametrize(
    "target",
    ["127.0.0.1:50051", "localhost:50051", "[::1]:50051", "127.0.0.2:1", "unix:/run/battery.sock"],
)
def test_loopback_targets_are_accepted(target: str) -> None:
    assert BatteryConfig(target=target).target == target


@pytest.mark.req("DP-010")
@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("", "host:port"),
        ("127.0.0.1", "not host:port"),
        ("127.0.0.1:0", "no valid port"),
        ("127.0.0.1:65536", "no valid port"),
        ("127.0.0.1:http", "no valid port"),
        ("::1:50051", "IPv6"),
        ("[::1:50051", "bracket"),
        ("unix:", "names no socket"),
        ("10.0.0.1:50051", "not a loopback"),
        ("battery.example:50051", "not a loopback"),
    ],
)
def test_bad_targets_name_the_target_field(target: str, problem: str) -> None:
    with pytest.raises(BatteryConfigError, match=problem) as caught:
        BatteryConfig(target=target)
    assert caught.value.field == "target"
    assert str(caught.value).startswith("battery client config: target:")


def test_a_remote_target_is_allowed_when_loopback_is_not_required() -> None:
    assert BatteryConfig(target="battery.example:8443", require_loopback=False)


def test_defaults_are_the_operator_flag_defaults() -> None:
    config = BatteryConfig(target="127.0.0.1:50051")
    assert config.call_timeout == timedelta(seconds=10)
    assert config.claim_timeout == timedelta(minutes=2)
    assert config.tls is None
    assert config.metadata == ()


@pytest.mark.parametrize("name", ["call_timeout", "claim_timeout", "keepalive_timeout"])
@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), 5])
def test_non_positive_timeouts_name_their_field(name: str, value: Any) -> None:
    with pytest.raises(BatteryConfigError) as caught:
        BatteryConfig(target="127.0.0.1:1", **{name: value})
    assert caught.value.field == name


def test_keepalive_can_be_turned_off_but_not_set_to_zero() -> None:
    assert BatteryConfig(target="127.0.0.1:1", keepalive_time=None).keepalive_time is None
    with pytest.raises(BatteryConfigError) as caught:
        BatteryConfig(target="127.0.0.1:1", keepalive_time=timedelta(0))
    assert caught.value.field == "keepalive_time"


def test_basic_token_is_base64_of_the_token_itself_and_hidden_from_repr() -> None:
    config = BatteryConfig(target="127.0.0.1:1", token="s3cret")
    expected = "basic " + base64.b64encode(b"s3cret").decode()
    assert config.metadata == (("authorization", expected),)
    assert "s3cret" not in repr(config)


def test_bearer_token_metadata() -> None:
    config = BatteryConfig(target="127.0.0.1:1", token="abc", token_scheme="bearer")
    assert config.metadata == (("authorization", "Bearer abc"),)


@pytest.mark.parametrize("token", ["", " padded ", "two\nlines"])
def test_malformed_tokens_name_the_token_field(token: str) -> None:
    with pytest.raises(BatteryConfigError) as caught:
        BatteryConfig(target="127.0.0.1:1", token=token)
    assert caught.value.field == "token"


def test_unknown_token_scheme_is_refused() -> None:
    with pytest.raises(BatteryConfigError) as caught:
        BatteryConfig(target="127.0.0.1:1", token="t", token_scheme="digest")  # type: ignore[arg-type]
    assert caught.value.field == "token_scheme"


def test_client_cert_and_key_go_together() -> None:
    with pytest.raises(BatteryConfigError) as caught:
        TLSConfig(cert_file=Path("/tls/tls.crt"))
    assert caught.value.field == "tls.key_file"
    with pytest.raises(BatteryConfigError) as caught:
        TLSConfig(key_file=Path("/tls/tls.key"))
    assert caught.value.field == "tls.cert_file"


def test_blank_server_name_is_refused() -> None:
    with pytest.raises(BatteryConfigError) as caught:
        TLSConfig(server_name=" ")
    assert caught.value.field == "tls.server_name"


def test_unreadable_and_empty_tls_files_name_their_field(tmp_path: Path) -> None:
    with pytest.raises(BatteryConfigError, match="cannot read") as caught:
        TLSConfig(ca_file=tmp_path / "missing.crt").read()
    assert caught.value.field == "tls.ca_file"
    empty = tmp_path / "empty.crt"
    empty.write_bytes(b"\n")
    with pytest.raises(BatteryConfigError, match="is empty") as caught:
        TLSConfig(ca_file=empty).read()
    assert caught.value.field == "tls.ca_file"


def test_seen_event_ids_must_be_positive() -> None:
    with pytest.raises(BatteryConfigError) as caught:
        BatteryConfig(target="127.0.0.1:1", seen_event_ids=0)
    assert caught.value.field == "seen_event_ids"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"initial": timedelta(0)}, "reconnect.initial"),
        ({"initial": timedelta(seconds=5), "maximum": timedelta(seconds=1)}, "reconnect.maximum"),
        ({"multiplier": 0.5}, "reconnect.multiplier"),
        ({"jitter": 1.5}, "reconnect.jitter"),
    ],
)
def test_reconnect_policy_is_checked(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(BatteryConfigError) as caught:
        ReconnectPolicy(**kwargs)
    assert caught.value.field == field


def test_backoff_grows_exponentially_within_its_jitter_and_stays_bounded() -> None:
    policy = ReconnectPolicy(
        initial=timedelta(seconds=1), maximum=timedelta(seconds=30), multiplier=2.0, jitter=0.2
    )
    rng = random.Random(7)
    for attempt, nominal in enumerate([1, 2, 4, 8, 16]):
        delay = policy.delay(attempt, rng)
        assert nominal * 0.8 <= delay <= nominal * 1.2
    assert all(24.0 <= policy.delay(n, rng) <= 30.0 for n in range(5, 10_000, 97))


def test_backoff_is_jittered() -> None:
    policy = ReconnectPolicy()
    rng = random.Random(1)
    assert len({policy.delay(3, rng) for _ in range(20)}) > 1
    assert {ReconnectPolicy(jitter=0.0).delay(3, rng) for _ in range(5)} == {8.0}
