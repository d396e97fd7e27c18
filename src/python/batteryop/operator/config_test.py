from datetime import timedelta
from pathlib import Path

import pytest

from batteryop.operator.config import ConfigError, parse
from batteryop.operator.main import main


def test_defaults_match_the_deployment() -> None:
    c = parse([])
    assert c.battery_address == "127.0.0.1:50051"
    assert (c.battery_call_timeout, c.battery_claim_timeout) == (
        timedelta(seconds=10),
        timedelta(minutes=2),
    )
    assert c.claim_concurrent_reconciles == 16
    assert c.bind_events is False  # the Bound condition records the bind; no Event


def test_bind_events_can_be_turned_on_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse(["--bind-events=true"]).bind_events is True
    assert parse(["--bind-events=false"]).bind_events is False
    monkeypatch.setenv("BATTERYOP_BIND_EVENTS", "true")
    assert parse([]).bind_events is True


@pytest.mark.req("DP-010")
@pytest.mark.parametrize("address", ["10.0.0.5:50051", "battery.example:50051", "0.0.0.0:1"])
def test_battery_must_be_on_loopback(address: str) -> None:
    with pytest.raises(ConfigError, match="--battery-address: .* must be a loopback address"):
        parse([f"--battery-address={address}"])


@pytest.mark.parametrize("address", ["localhost:50051", "[::1]:50051", "127.0.0.2:1"])
def test_loopback_forms_are_accepted(address: str) -> None:
    assert parse([f"--battery-address={address}"]).battery_address == address


@pytest.mark.req("DP-013")
def test_claim_timeout_is_separate_and_parsed() -> None:
    c = parse(["--battery-claim-timeout=90s", "--battery-call-timeout=500ms"])
    assert (c.battery_claim_timeout, c.battery_call_timeout) == (
        timedelta(seconds=90),
        timedelta(milliseconds=500),
    )


@pytest.mark.parametrize(
    ("flag", "rule"),
    [
        ("--battery-call-timeout=soon", "is not a duration"),
        ("--battery-claim-timeout=0s", "must be greater than zero"),
        ("--claim-concurrent-reconciles=1", "must be at least 2"),
        ("--claim-concurrent-reconciles=two", "is not a whole number"),
        ("--log-format=xml", "must be json or text"),
        ("--bind-events=maybe", "must be true or false"),
    ],
)
def test_a_bad_flag_is_named_with_its_rule(flag: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule) as err:
        parse([flag])
    assert err.value.flag == flag.split("=")[0]


def test_environment_sets_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATTERYOP_CLAIM_CONCURRENT_RECONCILES", "6")
    assert parse([]).claim_concurrent_reconciles == 6


def test_the_cli_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--battery-address=10.1.2.3:50051"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "battery-operator: --battery-address: '10.1.2.3:50051' must be a loopback address"
    ]


def test_db_runs_the_database_command_not_the_operator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # DP-116: `battery-operator db ...` in the operator's image is batteryop.battery.database.
    assert main(["db", "check", str(tmp_path / "missing.db"), "--scratch", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err
        == f"battery-operator db: {tmp_path / 'missing.db'}: No such file or directory\n"
    )
    with pytest.raises(SystemExit) as usage:
        main(["db"])
    assert usage.value.code == 2
