from __future__ import annotations

import pytest

from batteryop.operator.pools.hosts import HostSet

HOSTS = HostSet(
    {
        "host-c": {"kubernetes.io/arch": "amd64", "zone": "b"},
        "host-a": {"kubernetes.io/arch": "amd64", "zone": "a"},
        "host-b": {"kubernetes.io/arch": "arm64", "zone": "a"},
    }
)


@pytest.mark.req("PO-010")
def test_a_selector_picks_the_hosts_whose_node_has_all_its_labels_sorted() -> None:
    assert HOSTS.matching({"kubernetes.io/arch": "amd64"}) == ("host-a", "host-c")
    assert HOSTS.matching({"kubernetes.io/arch": "amd64", "zone": "a"}) == ("host-a",)
    assert HOSTS.matching({"zone": "a"}) == ("host-a", "host-b")


@pytest.mark.req("PO-010")
def test_an_empty_selector_picks_every_host() -> None:
    assert HOSTS.matching({}) == ("host-a", "host-b", "host-c")
    assert HOSTS.names == ("host-a", "host-b", "host-c")


@pytest.mark.req("PO-012")
def test_a_selector_may_pick_no_host() -> None:
    assert HOSTS.matching({"kubernetes.io/arch": "riscv64"}) == ()
    assert HOSTS.matching({"missing": ""}) == (), "an absent label is not an empty one"
    assert HostSet().matching({}) == ()


def test_a_host_set_is_a_frozen_value() -> None:
    labels = {"host-a": {"zone": "a"}}
    hosts = HostSet(labels)
    labels["host-a"]["zone"] = "b"
    labels["host-b"] = {}
    assert hosts.matching({"zone": "a"}) == ("host-a",), "copied on construction"
    assert hosts == HostSet({"host-a": {"zone": "a"}})
    assert hosts != HostSet({"host-a": {"zone": "b"}})
    assert hash(hosts) == hash(HostSet({"host-a": {"zone": "a"}}))
    assert len(hosts) == 1 and "host-a" in hosts and list(hosts) == ["host-a"]
    with pytest.raises(TypeError):
        hosts.labels["host-a"]["zone"] = "c"  # type: ignore[index]
