from __future__ import annotations

import json

import pytest

from batteryop.battery import configfile


@pytest.mark.req("DP-004", "IN-003", "IN-004")
def test_hosts_render_sorted_with_battery_tls_files_and_read_back() -> None:
    text = configfile.render_text({"b": "10.0.0.2:9090", "a": "10.0.0.1:9090"}, tls_dir="/t")
    body = json.loads(text)
    assert [h["name"] for h in body["hosts"]] == ["a", "b"]
    assert body["hosts"][0]["tls"] == {
        "cert_file": "/t/tls.crt",
        "key_file": "/t/tls.key",
        "ca_file": "/t/serving-ca.crt",
    }
    assert body["api_server"] == {"addr": "127.0.0.1:50051", "tls": {"insecure": True}}
    assert configfile.hosts_of(text) == {"a": "10.0.0.1:9090", "b": "10.0.0.2:9090"}
    assert text == configfile.render_text(
        {"a": "10.0.0.1:9090", "b": "10.0.0.2:9090"}, tls_dir="/t"
    )


def test_no_host_renders_the_placeholder_which_reads_back_as_none() -> None:
    text = configfile.render_text({})
    assert configfile.NO_HOSTS_NAME in text
    assert configfile.hosts_of(text) == {}


@pytest.mark.parametrize(
    ("text", "field"),
    [("{", "not JSON"), ("[]", "object"), ('{"hosts": [{"name": "a"}]}', "hosts\\[0\\]")],
)
def test_a_config_that_does_not_parse_names_the_field(text: str, field: str) -> None:
    with pytest.raises(configfile.ConfigFileError, match=field):
        configfile.hosts_of(text)
