"""Flags to ApproverConfig, and the refusals at start."""

from __future__ import annotations

import datetime

import pytest

from batteryop.api import names
from batteryop.csr_approver.config import ConfigError, parse
from batteryop.csr_approver.main import main


@pytest.mark.req("CT-020")
def test_without_a_trust_domain_the_approver_refuses_to_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATTERYOP_TRUST_DOMAIN", raising=False)
    with pytest.raises(ConfigError) as caught:
        parse([])
    assert caught.value.flag == "--trust-domain"
    assert main([]) == 2
    assert "--trust-domain: is required" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["Example.test", "a b", "x" * 256, "spiffe://x"])
def test_a_trust_domain_outside_the_spiffe_rules_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="--trust-domain"):
        parse([f"--trust-domain={value}"])


def test_defaults_fit_the_manifests_names() -> None:
    config = parse(["--trust-domain", "battery.liquidmetal-x.dev", "--namespace", "ops"])
    assert config.certificate_max_duration == datetime.timedelta(hours=168)
    assert config.serving_ca_secret == names.SERVING_CA_SECRET
    assert config.client_ca_secret == names.CLIENT_CA_SECRET
    assert config.ca_bundle_config_map == names.CA_BUNDLE_CONFIG_MAP
    assert config.address_pins_config_map == names.ADDRESS_PINS_CONFIG_MAP
    assert config.exec_agent_username == f"system:serviceaccount:ops:{names.EXEC_AGENT_NAME}"


def test_the_trust_domain_and_durations_come_from_the_environment_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BATTERYOP_TRUST_DOMAIN", "example.test")
    monkeypatch.setenv("BATTERYOP_CERTIFICATE_MAX_DURATION", "90m")
    config = parse(["--exec-agent-namespace", "agents"])
    assert config.trust_domain == "example.test"
    assert config.certificate_max_duration == datetime.timedelta(minutes=90)
    assert config.exec_agent_username.startswith("system:serviceaccount:agents:")


@pytest.mark.parametrize("value", ["0h", "-1h", "a week", ""])
def test_a_bad_maximum_lifetime_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="--certificate-max-duration"):
        parse(["--trust-domain=example.test", f"--certificate-max-duration={value}"])
