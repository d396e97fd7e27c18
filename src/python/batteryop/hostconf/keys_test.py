"""host.conf: what a Host accepts, skips and refuses, and what the templates may write."""

from __future__ import annotations

import pytest

from batteryop.hostconf import DEFAULTS, HostConfError, check, defaults_file, parse, render


@pytest.mark.req("HI-051")
def test_an_empty_file_means_every_default() -> None:
    assert parse("") == (dict(DEFAULTS), [])


@pytest.mark.req("HI-050")
def test_values_comments_quotes_and_unknown_keys() -> None:
    values, skipped = parse(
        '# a comment\n\nGUEST_SUBNET="10.30.0.0/24"\nPROTECTED_CIDRS=10.0.0.0/8, fd00::/8\n'
        "SOMETHING_NEW=1\nHOST_RESERVE_VCPU = 4\n"
    )
    assert values["GUEST_SUBNET"] == "10.30.0.0/24"
    assert values["PROTECTED_CIDRS"] == "10.0.0.0/8, fd00::/8"
    assert values["EXEC_AGENT_UID"] == "65532"
    assert skipped == ["SOMETHING_NEW"]


def test_a_line_that_is_not_key_equals_value_is_refused_not_run() -> None:
    with pytest.raises(HostConfError, match="line 2"):
        parse("GUEST_SUBNET=10.30.0.0/24\n$(reboot)\n")


@pytest.mark.parametrize(
    ("line", "key", "rule"),
    [
        ("GUEST_SUBNET=10.30.0.0/30", "GUEST_SUBNET", "/29 or larger"),
        ("GUEST_SUBNET=10.30.0.1/24", "GUEST_SUBNET", "CIDR"),
        ("THIN_POOL_DEVICE=nvme1n1", "THIN_POOL_DEVICE", "/dev/"),
        ("PROTECTED_CIDRS=10.0.0.0/8,nope", "PROTECTED_CIDRS", "CIDRs"),
        ("HOST_RESERVE_MEMORY_MB=-1", "HOST_RESERVE_MEMORY_MB", "whole number"),
        ("HOST_CONTROL_PORTS=9090,70000", "HOST_CONTROL_PORTS", "'70000'"),
        ("EXEC_AGENT_UID=0", "EXEC_AGENT_UID", "never 0"),
        ("GATEWAY_SERVICE_UIDS=65532", "GATEWAY_SERVICE_UIDS", "EXEC_AGENT_UID"),
    ],
)
def test_an_invalid_value_is_refused_with_the_key_and_the_rule(
    line: str, key: str, rule: str
) -> None:
    with pytest.raises(HostConfError) as raised:
        parse(f"# header\n{line}\n")
    assert raised.value.key == key
    assert rule in str(raised.value)
    assert (
        str(raised.value).startswith(f"host.conf line 2: {key}: ") or key == "GATEWAY_SERVICE_UIDS"
    )


def test_what_the_templates_write_may_only_name_known_keys() -> None:
    with pytest.raises(HostConfError, match="GUEST_SUBNETS: is not a key of host.conf"):
        check({"GUEST_SUBNETS": "10.30.0.0/24"})


def test_render_writes_the_given_keys_in_order_and_parses_back() -> None:
    given = {"PROTECTED_CIDRS": "10.0.0.0/16", "FLINTLOCKD_CLIENT_CIDRS": "10.244.0.0/16"}
    text = render(given)
    assert text == "PROTECTED_CIDRS=10.0.0.0/16\nFLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16\n"
    assert parse(text)[0] == {**DEFAULTS, **given}


def test_the_defaults_file_parses_to_the_defaults() -> None:
    assert parse(defaults_file()) == (dict(DEFAULTS), [])
