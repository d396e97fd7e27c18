import argparse
from datetime import timedelta

import pytest

from batteryop.obs.flags import FlagError, boolean, duration, env_name, flag_adder


def test_durations_read_with_or_without_a_unit() -> None:
    assert duration("--x", "500ms") == timedelta(milliseconds=500)
    assert duration("--x", " 30s ") == timedelta(seconds=30)
    assert duration("--x", "1.5m") == timedelta(seconds=90)
    assert duration("--x", "168h") == timedelta(hours=168)
    assert duration("--x", "2") == timedelta(seconds=2)
    assert duration("--x", "0") == timedelta(0)


@pytest.mark.parametrize("value", ["", "-1s", "1d", "s", "1 s", "1e3"])
def test_a_bad_duration_names_the_flag(value: str) -> None:
    with pytest.raises(FlagError) as caught:
        duration("--settle-time", value)
    assert caught.value.flag == "--settle-time"
    assert str(caught.value).startswith("--settle-time: ")


def test_positive_refuses_zero() -> None:
    with pytest.raises(FlagError, match="greater than zero"):
        duration("--max", "0", positive=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("False", False), (" 1 ", True), ("no", False), (True, True)],
)
def test_booleans(value: object, expected: bool) -> None:
    assert boolean("--x", value) is expected


@pytest.mark.parametrize("value", ["", "on", "2", "truth"])
def test_a_bad_boolean_names_the_flag_and_the_rule(value: str) -> None:
    with pytest.raises(FlagError, match="^--bind-events: .* must be true or false$"):
        boolean("--bind-events", value)


def test_a_flag_defaults_to_its_environment_twin_then_its_fallback() -> None:
    p = argparse.ArgumentParser()
    environ = {"BATTERYOP_CALL_TIMEOUT": "3s", "NODE_NAME": "node-a", "POD_NAMESPACE": "ns"}
    add = flag_adder(p, environ=environ, fallbacks={"--host-node": "NODE_NAME", "--x": "NOPE"})
    add("--call-timeout", "10s", "")
    add("--host-node", "", "")
    add("--x", "default", "")
    a = p.parse_args([])
    assert (a.call_timeout, a.host_node, a.x) == ("3s", "node-a", "default")
    assert p.parse_args(["--host-node", "flag"]).host_node == "flag"
    assert env_name("--call-timeout") == "BATTERYOP_CALL_TIMEOUT"
