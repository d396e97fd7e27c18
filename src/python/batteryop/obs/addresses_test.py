import pytest

from batteryop.obs.addresses import parse_bind_address


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (":8081", ("", 8081)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:9090", ("::1", 9090)),
        ("[::]:8443", ("::", 8443)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("localhost:8081", ("localhost", 8081)),
        ("metrics.example.internal:443", ("metrics.example.internal", 443)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        (":65535", ("", 65535)),
    ],
)
def test_valid_addresses_parse_to_host_and_port(value: str, expected: tuple[str, int]) -> None:
    assert parse_bind_address(value) == expected


def test_zero_disables_the_listener() -> None:
    assert parse_bind_address("0") is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "expected"),
        ("8080", "expected"),
        ("00", "expected"),
        ("127.0.0.1", "expected"),
        (":", "not a number"),
        (":http", "not a number"),
        (":-1", "not a number"),
        (": 80", "not a number"),
        (":\uff18\uff10", "not a number"),  # fullwidth digits
        (":65536", "out of range"),
        ("::1:9090", "in brackets"),
        ("[::1:9090", "brackets"),
        ("::1]:9090", "brackets"),
        ("[127.0.0.1]:80", "not an IPv6 address"),
        ("[nope]:80", "not an IPv6 address"),
        ("999.1.1.1:80", "not an IP address or host name"),
        ("bad_host:80", "not an IP address or host name"),
        ("-leading.dash:80", "not an IP address or host name"),
    ],
)
def test_invalid_addresses_raise_naming_the_value(value: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_bind_address(value)
    assert repr(value) in str(err.value)
    assert why in str(err.value)


def test_the_error_names_the_flag_when_given() -> None:
    with pytest.raises(ValueError, match=r"--metrics-bind-address='8080'"):
        parse_bind_address("8080", flag="--metrics-bind-address")
