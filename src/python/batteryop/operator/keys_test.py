from __future__ import annotations

import pytest

from batteryop.api import samples
from batteryop.battery.models import PoolRef
from batteryop.operator.keys import PoolKey, pool_key, pool_key_for_claim


@pytest.mark.req("PO-044")
def test_a_claim_names_the_pool_to_queue_again_when_it_goes() -> None:
    claim = samples.sample_claim(pool="runners", namespace="ci")
    assert pool_key_for_claim(claim) == PoolKey("ci", "runners")
    assert str(pool_key_for_claim(claim)) == "ci/runners"


@pytest.mark.req("CL-108", "PO-044")
def test_a_claim_served_by_a_fallback_pool_queues_that_pool() -> None:
    claim = samples.sample_claim(pool="runners", namespace="ci")
    claim["spec"]["fallbackPoolRefs"] = [{"name": "spare"}]
    assert pool_key_for_claim(claim) == PoolKey("ci", "runners")  # not Bound yet
    claim["status"] = {"phase": "Bound", "poolRef": {"name": "spare"}}
    assert pool_key_for_claim(claim) == PoolKey("ci", "spare")


def test_a_claim_body_naming_no_pool_gives_none() -> None:
    assert pool_key_for_claim({}) is None
    assert pool_key_for_claim(samples.sample_claim(namespace=None)) is None
    assert pool_key_for_claim({"metadata": {"namespace": "ci"}, "spec": {"poolRef": None}}) is None
    assert pool_key_for_claim({"metadata": "junk", "spec": {"poolRef": {"name": "p"}}}) is None


def test_a_pool_body_has_the_key_of_its_battery_pool() -> None:
    key = pool_key(samples.sample_pool(name="p", namespace="ns"))
    assert key == PoolKey("ns", "p")
    assert key.ref == PoolRef(namespace="ns", name="p")
