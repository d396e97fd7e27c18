"""Tests of the standalone fake battery's configuration: poolmgrd's config file and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batteryop.testing.fake_battery.__main__ import (
    FakeBatteryConfigError,
    load_config,
    parse_args,
    parse_duration,
    settings_from,
)
from batteryop.testing.fake_battery.hosts import HostConfig, HostTLSConfig


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("2.5", 2.5), ("1.5s", 1.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "1s junk", "-"])
def test_parse_duration_refuses_junk(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def _write(tmp_path: Path, config: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


V040_CONFIG = {
    "api_server": {"addr": "127.0.0.1:50051", "tls": {"insecure": True}},
    "metrics_addr": ":9090",
    "sweep_interval": "2s",
    "warning_window": "5s",
    "hosts": [
        {"name": "node-a", "address": "10.0.0.1:9090", "tls": {"insecure": True}},
        {
            "name": "node-b",
            "address": "10.0.0.2:9090",
            "tls": {"ca_file": "/etc/ca.pem", "cert_file": "/c.pem", "key_file": "/k.pem"},
        },
    ],
}


@pytest.mark.req("TD-107")
def test_reads_poolmgrd_v040_config(tmp_path: Path) -> None:
    settings = load_config(_write(tmp_path, V040_CONFIG))
    assert settings.listen == "127.0.0.1:50051"
    assert (settings.sweep_interval, settings.warning_window) == (2.0, 5.0)
    assert settings.hosts == [
        HostConfig("node-a", "10.0.0.1:9090", HostTLSConfig(insecure=True)),
        HostConfig(
            "node-b",
            "10.0.0.2:9090",
            HostTLSConfig(
                insecure=False, ca_file="/etc/ca.pem", cert_file="/c.pem", key_file="/k.pem"
            ),
        ),
    ]


@pytest.mark.req("TD-107")
@pytest.mark.parametrize(
    "change",
    [
        {"api_server": {}},
        {"hosts": []},
        {"sweep_interval": "0s"},
        {"warning_window": "soon"},
        {"api_server": {"addr": ":1", "tls": {"insecure": False, "cert_file": "c"}}},
        {"hosts": [{"name": "a", "address": "b:1", "tls": {"insecure": True, "ca_file": "x"}}]},
        {"hosts": [{"name": "a"}]},
    ],
)
def test_refuses_bad_configs(tmp_path: Path, change: dict[str, object]) -> None:
    with pytest.raises(FakeBatteryConfigError):
        load_config(_write(tmp_path, {**V040_CONFIG, **change}))


@pytest.mark.req("TD-107")
def test_flags_add_hosts_and_override_the_file(tmp_path: Path) -> None:
    args = parse_args(
        [
            "-config",
            _write(tmp_path, V040_CONFIG),
            "-db",
            "state/poolmgr.db",
            "--listen=127.0.0.1:0",
            "--host=node-c=127.0.0.1:9999",
            "--sweep-interval=500ms",
        ]
    )
    settings = settings_from(args)
    assert args.db == "state/poolmgr.db"
    assert settings.listen == "127.0.0.1:0"
    assert settings.sweep_interval == 0.5
    assert [h.name for h in settings.hosts] == ["node-a", "node-b", "node-c"]
    with pytest.raises(FakeBatteryConfigError):
        settings_from(parse_args(["--host=nameonly"]))
