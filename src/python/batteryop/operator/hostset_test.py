import json

import pytest

from batteryop.api import names
from batteryop.operator.hostset import HostsAnnotationError, host_set, published_hosts


def configmap(value: str | None) -> dict[str, object]:
    annotations = {} if value is None else {names.HOSTS_ANNOTATION: value}
    return {"metadata": {"name": names.BATTERY_CONFIG_MAP, "annotations": annotations}}


def node(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


def test_nothing_published_is_none_not_empty() -> None:
    assert published_hosts(None) is None
    assert published_hosts(configmap(None)) is None
    assert host_set(None, {}) is None
    assert published_hosts(configmap("[]")) == ()


def test_names_and_objects_are_read_sorted_and_unique() -> None:
    value = json.dumps(["h2", {"name": "h1", "address": "10.0.0.1:9090"}, "h2"])
    assert published_hosts(configmap(value)) == ("h1", "h2")


@pytest.mark.parametrize("value", ["{", '{"h1": 1}', "[1]", '[{"address": "x"}]', '[""]'])
def test_a_malformed_annotation_names_the_annotation(value: str) -> None:
    with pytest.raises(HostsAnnotationError, match=names.HOSTS_ANNOTATION):
        published_hosts(configmap(value))


@pytest.mark.req("PO-010")
def test_only_hosts_with_a_node_count_and_carry_its_labels() -> None:
    nodes = {"h1": node("h1", zone="a"), "other": node("other", zone="a")}
    hosts = host_set(("h1", "h2"), nodes)
    assert hosts is not None
    assert hosts.names == ("h1",)
    assert hosts.matching({"zone": "a"}) == ("h1",)
