from __future__ import annotations

import pytest

from batteryop.api import names
from batteryop.kube.resources import (
    CLAIMS,
    CONFIGMAPS,
    EVENTS,
    LEASES,
    NODES,
    POOLS,
    Resource,
)


def test_core_resources_live_under_api_v1() -> None:
    assert CONFIGMAPS.api_path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert CONFIGMAPS.api_path("ns", "cm") == "/api/v1/namespaces/ns/configmaps/cm"
    assert CONFIGMAPS.api_version == "v1"


def test_group_resources_live_under_apis() -> None:
    assert POOLS.api_path("ns", "p", "status") == (
        f"/apis/{names.GROUP}/{names.VERSION}/namespaces/ns/pools/p/status"
    )
    assert CLAIMS.plural == names.CLAIM_PLURAL
    assert EVENTS.api_version == "events.k8s.io/v1"
    assert LEASES.api_path("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"


def test_a_namespaced_collection_without_namespace_spans_all_namespaces() -> None:
    assert CONFIGMAPS.api_path(None) == "/api/v1/configmaps"


def test_a_namespaced_object_needs_its_namespace() -> None:
    with pytest.raises(ValueError, match="needs a namespace"):
        CONFIGMAPS.api_path(None, "cm")


def test_cluster_scoped_resources_take_no_namespace() -> None:
    assert NODES.api_path(None, "n1") == "/api/v1/nodes/n1"
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.api_path("ns", "n1")


def test_a_subresource_needs_an_object() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        POOLS.api_path("ns", None, "status")


def test_path_segments_are_quoted() -> None:
    res = Resource("", "v1", "configmaps")
    assert res.api_path("ns", "a/b?c") == "/api/v1/namespaces/ns/configmaps/a%2Fb%3Fc"
    assert res.api_path("ns", "system:x") == "/api/v1/namespaces/ns/configmaps/system:x"
