"""The claim cache's indexes stay equal to a walk over the cache, whatever arrives in any order."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batteryop.operator.claims import indexes
from batteryop.operator.runtime import ObjectCache, key_of

NAMES = ("a", "b", "c")
VMS = (None, "vm-1", "vm-2")
NODES = (None, "host-a", "host-b")
LISTS = (("p",), ("p", "q"), ("q", "p"))  # a claim's Pools: first, then fallback
WAITING = ("ns/p", "ns/q")


def claim(
    name: str,
    rv: str,
    vm: str | None,
    node: str | None,
    uid: str = "u",
    pools: tuple[str, ...] = ("p",),
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if vm is not None:
        status["microVM"] = {"uid": vm}
        status["leaseID"] = f"lease-{vm}"
        status["phase"] = "Bound"
    else:
        status["phase"] = "Pending"
    if node is not None:
        status["host"] = {"nodeName": node}
    meta = {"namespace": "ns", "name": name, "uid": f"{uid}-{name}", "resourceVersion": rv}
    spec: dict[str, Any] = {"poolRef": {"name": pools[0]}}
    if pools[1:]:
        spec["fallbackPoolRefs"] = [{"name": pool} for pool in pools[1:]]
    return {"metadata": meta, "spec": spec, "status": status}


def walked(cache: ObjectCache, index: str, value: str) -> list[tuple[str, str]]:
    """What the index must answer: a walk over every cached body."""
    of = indexes.INDEXERS[index]

    def files(body: dict[str, Any]) -> bool:
        found = of(body)
        return value == found if isinstance(found, str) or found is None else value in found

    return sorted(key_of(body) for body in cache if files(body))


def assert_consistent(cache: ObjectCache) -> None:
    for index, values in (
        (indexes.BY_MICROVM, VMS),
        (indexes.BY_NODE, NODES),
        (indexes.BY_WAITING_POOL, WAITING),
    ):
        for value in values:
            if value is not None:
                assert cache.keys_by(index, value) == walked(cache, index, value), (index, value)
    filed = sum(1 for body in cache if indexes.microvm_of(body))
    assert cache.sizes()["index:microvm"] == filed


def new_cache() -> ObjectCache:
    return ObjectCache(indexers=indexes.INDEXERS)


def test_a_claim_is_filed_once_its_status_records_the_value_and_leaves_when_it_changes() -> None:
    cache = new_cache()
    cache.observe("ADDED", claim("a", "1", None, None))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == []
    cache.observe("MODIFIED", claim("a", "2", "vm-1", "host-a"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == [("ns", "a")]
    assert cache.keys_by(indexes.BY_NODE, "host-a") == [("ns", "a")]
    cache.observe("MODIFIED", claim("a", "3", "vm-2", "host-b"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == []
    assert cache.keys_by(indexes.BY_NODE, "host-b") == [("ns", "a")]
    cache.observe("DELETED", claim("a", "4", "vm-2", "host-b"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-2") == []
    assert cache.sizes() == {
        "bodies": 0,
        "echoes": 0,
        "writes": 0,
        "index:microvm": 0,
        "index:node": 0,
        "index:waiting": 0,
    }


@pytest.mark.req("CL-109")
def test_a_pending_claim_waits_on_each_pool_of_its_list_until_it_records_a_lease() -> None:
    cache = new_cache()
    cache.observe("ADDED", claim("a", "1", None, None, pools=("p", "q")))
    cache.observe("ADDED", claim("b", "1", None, None, pools=("q",)))
    assert cache.keys_by(indexes.BY_WAITING_POOL, "ns/p") == [("ns", "a")]
    assert cache.keys_by(indexes.BY_WAITING_POOL, "ns/q") == [("ns", "a"), ("ns", "b")]
    cache.observe("MODIFIED", claim("a", "2", "vm-1", "host-a", pools=("p", "q")))  # Bound
    assert cache.keys_by(indexes.BY_WAITING_POOL, "ns/p") == []
    assert cache.keys_by(indexes.BY_WAITING_POOL, "ns/q") == [("ns", "b")]
    deleting = claim("b", "2", None, None, pools=("q",))
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    cache.observe("MODIFIED", deleting)
    assert cache.sizes()["index:waiting"] == 0
    new = claim("c", "1", None, None)
    del new["status"]["phase"]  # not reconciled yet: its first reconcile is under way
    cache.observe("ADDED", new)
    assert cache.sizes()["index:waiting"] == 0


def test_an_answer_refiles_the_claim_and_a_deleted_event_before_it_leaves_no_entry() -> None:
    cache = new_cache()
    cache.observe("ADDED", claim("a", "1", None, None))
    with cache.writing(("ns", "a")) as write:
        assert write.answered(claim("a", "2", "vm-1", "host-a"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == [("ns", "a")]
    with cache.writing(("ns", "a")) as write:
        cache.observe("DELETED", claim("a", "3", "vm-1", "host-a"))  # before the answer
        assert not write.answered(claim("a", "3", "vm-1", "host-a"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == []
    assert cache.sizes()["index:node"] == 0


def test_two_claims_recording_one_microvm_are_both_found() -> None:
    cache = new_cache()
    cache.observe("ADDED", claim("a", "1", "vm-1", "host-a"))
    cache.observe("ADDED", claim("b", "1", "vm-1", "host-a"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == [("ns", "a"), ("ns", "b")]
    cache.drop(("ns", "a"))
    assert cache.keys_by(indexes.BY_MICROVM, "vm-1") == [("ns", "b")]


def test_every_order_of_add_update_and_delete_keeps_the_indexes_consistent() -> None:
    ops = [
        ("ADDED", claim("a", "1", None, None)),
        ("MODIFIED", claim("a", "2", "vm-1", "host-a")),
        ("ADDED", claim("b", "1", "vm-1", "host-b")),
        ("DELETED", claim("a", "3", "vm-1", "host-a")),
        (None, claim("b", "2", "vm-2", "host-b")),
    ]
    for order in itertools.permutations(ops):
        cache = new_cache()
        for event_type, body in order:
            cache.observe(event_type, body)
            assert_consistent(cache)


OPS = st.tuples(
    st.sampled_from(["ADDED", "MODIFIED", None, "DELETED", "answer", "answer-after-delete"]),
    st.sampled_from(NAMES),
    st.sampled_from(VMS),
    st.sampled_from(NODES),
    st.sampled_from(["u", "v"]),  # a claim deleted and made again under its name
    st.sampled_from(LISTS),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=30))
def test_random_watch_events_and_write_answers_keep_the_indexes_consistent(
    ops: list[tuple[str | None, str, str | None, str | None, str, tuple[str, ...]]],
) -> None:
    cache = new_cache()
    for n, (op, name, vm, node, uid, pools) in enumerate(ops):
        body = claim(name, f"rv{n}", vm, node, uid, pools)
        if op == "answer":
            with cache.writing(key_of(body)) as write:
                write.answered(body)
        elif op == "answer-after-delete":
            with cache.writing(key_of(body)) as write:
                cache.observe("DELETED", body)
                assert not write.answered(body)
        else:
            cache.observe(op, body)
        assert_consistent(cache)
    for body in list(cache):
        cache.observe("DELETED", body)
    assert {k: v for k, v in cache.sizes().items() if v} == {}
