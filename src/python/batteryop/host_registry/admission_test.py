from __future__ import annotations

from typing import Any

import pytest

from batteryop.api import names
from batteryop.host_registry.admission import (
    AddressError,
    Refusal,
    admit,
    admit_all,
    check_address,
)


def node(
    *,
    name: str = "host-1",
    labelled: bool = True,
    ready: str | None = "true",
    address: str | None = "10.0.0.5:9090",
    unschedulable: bool = False,
    deleting: bool = False,
    internal_ips: tuple[str, ...] = ("10.0.0.5",),
    node_ready: str | None = None,
) -> dict[str, Any]:
    annotations = {}
    if ready is not None:
        annotations[names.EXEC_AGENT_READY_ANNOTATION] = ready
    if address is not None:
        annotations[names.FLINTLOCKD_ADDRESS_ANNOTATION] = address
    meta: dict[str, Any] = {
        "name": name,
        "labels": {names.HOST_LABEL: names.HOST_LABEL_VALUE} if labelled else {},
        "annotations": annotations,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    addresses = [{"type": "Hostname", "address": "10.0.0.99"}]
    addresses += [{"type": "InternalIP", "address": ip} for ip in internal_ips]
    status: dict[str, Any] = {"addresses": addresses}
    if node_ready is not None:
        status["conditions"] = [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": node_ready, "reason": "NodeStatusUnknown"},
        ]
    return {
        "metadata": meta,
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": status,
    }


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


@pytest.mark.req("IN-110")
@pytest.mark.parametrize(
    ("condition", "host"), [("True", True), ("False", False), ("Unknown", False)]
)
def test_a_node_whose_own_ready_condition_is_not_true_is_not_a_host(
    condition: str, host: bool
) -> None:
    # The agent's report still says ready: its Pod outlives a dead kubelet or runtime.
    a = admit(node(node_ready=condition))
    assert a.is_host is host
    if not host:
        assert a.refusal is Refusal.NODE_NOT_READY and condition in a.detail


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


# --- IN-108: the address is the Node's own; IN-109: no two Hosts at one IP ---------------------


@pytest.mark.req("IN-108")
@pytest.mark.parametrize(
    ("address", "internal_ips"),
    [
        ("10.0.0.5:9090", ("10.0.0.5",)),
        ("10.0.0.5:9090", ("192.168.1.5", "10.0.0.5")),
        ("[fd00::5]:9090", ("fd00:0:0::5",)),
    ],
)
def test_an_address_among_the_nodes_internal_ips_is_admitted(
    address: str, internal_ips: tuple[str, ...]
) -> None:
    assert admit(node(address=address, internal_ips=internal_ips)).address == address


@pytest.mark.req("IN-108")
@pytest.mark.parametrize(
    ("internal_ips", "listed"),
    [
        (("10.0.0.6",), "(10.0.0.6)"),
        ((), "(none)"),  # a Node whose kubelet has not reported an address yet
        (("not-an-ip",), "(none)"),
    ],
)
def test_an_address_not_among_the_nodes_internal_ips_is_refused_naming_them(
    internal_ips: tuple[str, ...], listed: str
) -> None:
    # Not even a Hostname entry with that IP counts (node() adds one at 10.0.0.99).
    a = admit(node(address="10.0.0.99:9090", internal_ips=internal_ips))
    assert not a.is_host and a.refusal is Refusal.ADDRESS_NOT_ON_NODE
    assert a.detail == (
        f"'10.0.0.99:9090', which is not one of the Node's InternalIP addresses {listed}"
    )


def _nodes(*specs: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """Nodes named and reporting as given, each with its report's IP as its InternalIP."""
    return {
        name: node(name=name, address=address, internal_ips=(address.rpartition(":")[0],))
        for name, address in specs
    }


@pytest.mark.req("IN-109")
def test_hosts_at_distinct_ips_are_all_admitted() -> None:
    verdicts = admit_all(_nodes(("a", "10.0.0.5:9090"), ("b", "10.0.0.6:9090")))
    assert {n: v.address for n, v in verdicts.items()} == {
        "a": "10.0.0.5:9090",
        "b": "10.0.0.6:9090",
    }


@pytest.mark.req("IN-109")
def test_the_host_battery_has_keeps_its_ip_and_a_newcomer_is_refused() -> None:
    nodes = _nodes(("a", "10.0.0.5:9090"), ("b", "10.0.0.5:9191"))
    verdicts = admit_all(nodes, held={"a": "10.0.0.5:9090"})
    assert verdicts["a"].address == "10.0.0.5:9090"
    assert verdicts["b"].refusal is Refusal.ADDRESS_IN_USE
    assert verdicts["b"].detail == (
        "'10.0.0.5:9191', whose IP 10.0.0.5 the report of Node a also names (battery has it there)"
    )


@pytest.mark.req("IN-109")
def test_hosts_sharing_an_ip_battery_has_at_none_are_all_refused() -> None:
    nodes = _nodes(("a", "10.0.0.5:9090"), ("b", "10.0.0.5:9090"), ("c", "10.0.0.7:9090"))
    # battery has `a`, but at another address: it holds no claim on this one.
    verdicts = admit_all(nodes, held={"a": "10.0.0.8:9090"})
    assert [verdicts[n].refusal for n in "ab"] == [Refusal.ADDRESS_IN_USE] * 2
    assert "the report of Node b also names" in verdicts["a"].detail
    assert verdicts["c"].address == "10.0.0.7:9090"
