from __future__ import annotations

from typing import Any

import pytest

from batteryop.api import names
from batteryop.host_registry.admission import AddressError, Refusal, admit, check_address


def node(
    *,
    labelled: bool = True,
    ready: str | None = "true",
    address: str | None = "10.0.0.5:9090",
    unschedulable: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    annotations = {}
    if ready is not None:
        annotations[names.EXEC_AGENT_READY_ANNOTATION] = ready
    if address is not None:
        annotations[names.FLINTLOCKD_ADDRESS_ANNOTATION] = address
    meta: dict[str, Any] = {
        "name": "host-1",
        "labels": {names.HOST_LABEL: names.HOST_LABEL_VALUE} if labelled else {},
        "annotations": annotations,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"unschedulable": True} if unschedulable else {}}


@pytest.mark.req("IN-001", "IN-003")
def test_a_labelled_node_reporting_ready_is_a_host_at_its_reported_address() -> None:
    a = admit(node())
    assert a.is_host and a.address == "10.0.0.5:9090" and not a.cordoned


@pytest.mark.req("IN-001", "IN-002")
@pytest.mark.parametrize(
    ("kwargs", "refusal"),
    [
        ({"labelled": False}, Refusal.NOT_LABELLED),
        ({"ready": "false"}, Refusal.NOT_READY),
        ({"ready": None}, Refusal.NOT_READY),
        ({"ready": "True"}, Refusal.NOT_READY),
        ({"deleting": True}, Refusal.DELETING),
        ({"address": None}, Refusal.NO_ADDRESS),
        ({"address": "flintlock.example:9090"}, Refusal.INVALID_ADDRESS),
    ],
)
def test_a_node_is_not_a_host_without_every_condition(
    kwargs: dict[str, Any], refusal: Refusal
) -> None:
    a = admit(node(**kwargs))
    assert not a.is_host and a.refusal is refusal


def test_a_cordoned_host_stays_a_host_and_is_marked_cordoned() -> None:
    a = admit(node(unschedulable=True))
    assert a.is_host and a.cordoned


@pytest.mark.parametrize("value", ["10.0.0.5:9090", "[fd00::5]:9090", "127.0.0.21:1"])
def test_ip_and_port_addresses_are_accepted(value: str) -> None:
    assert check_address(value) == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("10.0.0.5", "host:port"),
        ("10.0.0.5:0", "port"),
        ("10.0.0.5:70000", "port"),
        ("10.0.0.5:90a", "port"),
        ("fd00::5:9090", "IPv6"),
        ("[10.0.0.5]:9090", "brackets"),
        ("host.example:9090", "IP address"),
        ("0.0.0.0:9090", "one Host"),
        ("224.0.0.1:9090", "one Host"),
        (":9090", "host:port"),
    ],
)
def test_bad_addresses_are_refused_naming_the_rule(value: str, rule: str) -> None:
    with pytest.raises(AddressError, match=rule):
        check_address(value)
