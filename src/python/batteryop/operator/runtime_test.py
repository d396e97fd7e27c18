"""The runtime's cache and its write path: echoes, opaque resourceVersions, deleted objects."""

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from batteryop.api import names, samples
from batteryop.api.clock import FakeClock
from batteryop.api.conditions import ClaimConditionType, EventType
from batteryop.kube.outcome import Outcome
from batteryop.kube.resources import CLAIMS, POOLS, Resource
from batteryop.kube.workqueue import Retry
from batteryop.operator.runtime import (
    LOCKED_STATUS_CONFLICT_RETRY_SECONDS,
    Controller,
    ObjectCache,
)
from batteryop.testing.fake_kube import FakeKube, RecordingRecorder

KEY = ("ns", "c")


def body(rv: str, phase: str = "", uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": uid, "resourceVersion": rv},
        "status": {"phase": phase},
    }


def answer(cache: ObjectCache, answered: Mapping[str, Any]) -> bool:
    with cache.writing(KEY) as write:
        return write.answered(answered)


# resourceVersions below are deliberately not in any order: the cache compares them for
# equality only, and takes order from the watch (events of one object arrive in order).


@pytest.mark.req("CL-101")
def test_the_echo_of_a_cached_write_and_the_events_before_it_change_nothing() -> None:
    cache = ObjectCache()
    assert cache.observe("ADDED", body("m", "Pending"))
    assert answer(cache, body("b", "Bound"))  # our write's answer
    assert not cache.observe("MODIFIED", body("z", "Pending"))  # an older event, late
    assert not cache.observe("MODIFIED", body("b", "Bound"))  # its echo
    assert cache.get(KEY) == body("b", "Bound")
    assert cache.observe("MODIFIED", body("a", "Expired"))  # somebody's newer write
    assert cache.get(KEY) == body("a", "Expired")
    assert cache.sizes() == {"bodies": 1, "echoes": 0, "writes": 0}


def test_bodies_are_kept_without_their_managed_fields() -> None:
    cache = ObjectCache()
    watched = body("m", "Pending")
    watched["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    cache.observe("ADDED", watched)
    assert cache.get(KEY) == body("m", "Pending")
    answered = body("b", "Bound")
    answered["metadata"]["managedFields"] = [{"manager": "battery-operator"}]
    assert answer(cache, answered)
    assert cache.get(KEY) == body("b", "Bound")
    assert "managedFields" in answered["metadata"]  # the caller's body is left as it was


def test_bodies_share_their_keys_and_short_strings() -> None:
    cache = ObjectCache()
    long = "a message longer than what is shared, " * 2
    # Decoded one by one, as watch events are: each has its own copy of every string.
    first, second = (
        json.loads(json.dumps({**body(rv, "Bound"), "message": long})) for rv in ("1", "2")
    )
    first["status"]["message"] = first.pop("message")
    second["status"]["message"] = second.pop("message")
    second["metadata"]["name"] = "d"
    assert first["status"]["phase"] is not second["status"]["phase"]
    cache.observe("ADDED", first)
    cache.observe("ADDED", second)
    a, b = cache.get(("ns", "c")), cache.get(("ns", "d"))
    assert a == first and b == second  # the same content
    assert a is not None and b is not None
    key_a = next(k for k in a["status"] if k == "phase")
    key_b = next(k for k in b["status"] if k == "phase")
    assert key_a is key_b and a["status"]["phase"] is b["status"]["phase"]
    assert a["status"]["message"] is not b["status"]["message"]  # long strings stay apart


def test_a_string_subclass_in_a_body_is_kept_as_it_is() -> None:
    """A fake API server may answer with enum members where JSON has plain strings."""
    cache = ObjectCache()
    answered = body("b", "Bound")
    answered["status"]["conditions"] = [{"type": ClaimConditionType.BOUND, "status": "True"}]
    assert answer(cache, answered)
    assert cache.get(KEY) == answered


def test_two_answers_wait_for_both_echoes_in_order() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("9", "Pending"))
    answer(cache, body("7", "Bound"))  # status
    answer(cache, body("3", "Bound"))  # then a finalizer write
    assert not cache.observe("MODIFIED", body("7", "Bound"))  # the first echo
    assert cache.get(KEY) == body("3", "Bound")  # still the newer answer
    assert not cache.observe("MODIFIED", body("3", "Bound"))
    assert cache.observe("MODIFIED", body("1", "Expired"))


def test_an_answer_that_changed_nothing_waits_for_no_echo() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("4", "Bound"))
    assert answer(cache, body("4", "Bound"))  # a patch that changed nothing: same version
    assert cache.observe("MODIFIED", body("2", "Expired"))  # the next change is taken


def test_a_listing_is_taken_as_it_is_and_forgets_expected_echoes() -> None:
    cache = ObjectCache()
    answer(cache, body("5", "Bound"))
    assert cache.observe(None, body("8", "Expired"))  # a relisted watch: the echo never comes
    assert cache.get(KEY) == body("8", "Expired")
    assert not cache.observe(None, body("8", "Expired"))  # listed again, unchanged
    assert cache.observe("MODIFIED", body("6", "Bound"))


def test_an_echo_that_never_comes_is_given_up_after_the_timeout() -> None:
    clock = FakeClock()
    cache = ObjectCache(clock=clock, echo_timeout=60)
    answer(cache, body("5", "Bound"))
    assert not cache.observe("MODIFIED", body("6", "Expired"))
    clock.advance(61.0)
    assert cache.observe("MODIFIED", body("7", "Expired"))
    assert cache.get(KEY) == body("7", "Expired")
    assert cache.sizes()["echoes"] == 0


def test_an_answer_overtaken_by_its_own_echo_and_a_later_change_is_not_stored() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("1", "Pending"))
    with cache.writing(KEY) as write:
        assert cache.observe("MODIFIED", body("x", "Bound"))  # the write's version, first
        assert cache.observe("MODIFIED", body("y", "Expired"))  # somebody's change after it
        assert not write.answered(body("x", "Bound"))  # then the answer comes back
    assert cache.get(KEY) == body("y", "Expired")
    assert cache.observe("MODIFIED", body("z", "Bound"))  # and the watch is not held up
    assert cache.sizes() == {"bodies": 1, "echoes": 0, "writes": 0}


def test_an_answer_overtaken_by_its_own_echo_alone_is_the_cached_body() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("1", "Pending"))
    with cache.writing(KEY) as write:
        cache.observe("MODIFIED", body("x", "Bound"))
        assert write.answered(body("x", "Bound"))
    assert cache.get(KEY) == body("x", "Bound")
    assert cache.sizes()["echoes"] == 0


def test_an_answer_after_the_deleted_event_is_not_stored() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("1", "Pending"))
    with cache.writing(KEY) as write:
        cache.observe("DELETED", body("2", "Pending"))
        assert not write.answered(body("3", "Bound"))
    assert cache.get(KEY) is None
    assert cache.sizes() == {"bodies": 0, "echoes": 0, "writes": 0}


def test_an_answer_about_another_object_of_the_same_name_is_not_stored() -> None:
    cache = ObjectCache()
    cache.observe("ADDED", body("1", "Pending", uid="new"))
    assert not answer(cache, body("2", "Bound", uid="old"))
    assert cache.get(KEY) == body("1", "Pending", uid="new")


# -- a controller over an in-memory API server ---------------------------------------------


async def never(body: Mapping[str, Any]) -> Outcome:
    raise AssertionError("not reconciled here")


def controller(kube: FakeKube, resource: Resource = POOLS) -> Controller:
    return Controller("test", resource, never, kube=kube, recorder=RecordingRecorder(), workers=1)


EMPTY = {"bodies": 0, "echoes": 0, "writes": 0}


def kept(controller: Controller) -> dict[str, int]:
    """The controller's maps but its queue's (not running here: a deleted key leaves the
    queue when its turn comes and the reconcile finds no body)."""
    return {k: v for k, v in controller.sizes().items() if not k.startswith("queue:")}


@pytest.mark.req("CL-004", "PO-044")
async def test_a_finalizer_removal_answered_after_the_deleted_event_leaves_no_zombie() -> None:
    # The burst case of issue 8: the watch's DELETED for the Pool overtakes the answer to the
    # write that removed its finalizer. A Pool that came back would keep every new claim on
    # its name PoolDeleting instead of PoolNotFound.
    kube = FakeKube()
    pools = controller(kube)
    pool = samples.demo_pool(namespace="ns")
    pool["metadata"]["finalizers"] = [names.POOL_FINALIZER]
    kube.create(POOLS, pool)
    kube.delete(POOLS, "demo", "ns")
    seen = kube.deliver(0, pools.observe)
    deleting = pools.cache.get(("ns", "demo"))
    assert deleting is not None

    kube.hold_answers()
    write = asyncio.create_task(
        pools.apply(("ns", "demo"), deleting, Outcome(remove_finalizer=names.POOL_FINALIZER))
    )
    await kube.held.wait()  # the Pool is gone in the API server; the answer is on its way
    kube.deliver(seen, pools.observe)  # and the watch's DELETED comes first
    kube.release()
    await write

    assert pools.cache.get(("ns", "demo")) is None
    assert kept(pools) == EMPTY


async def test_a_status_write_answered_after_the_deleted_event_leaves_no_zombie() -> None:
    kube = FakeKube()
    claims = controller(kube, CLAIMS)
    claim = samples.sample_claim(name="c", pool="p", namespace="ns")
    kube.create(CLAIMS, claim)
    seen = kube.deliver(0, claims.observe)
    kube.hold_answers()
    cached = claims.cache.get(KEY)
    assert cached is not None
    write = asyncio.create_task(claims.apply(KEY, cached, Outcome(status={"phase": "Pending"})))
    await kube.held.wait()
    kube.delete(CLAIMS, "c", "ns")  # no finalizer: it goes at once
    kube.deliver(seen, claims.observe)
    kube.release()
    await write
    assert claims.cache.get(KEY) is None
    assert kept(claims) == EMPTY


async def test_a_claim_deleted_before_it_was_bound_leaves_nothing_behind() -> None:
    # A claim deleted before any bind leaves nothing behind (memory growing with every claim
    # ever deleted).
    kube = FakeKube()
    claims = controller(kube, CLAIMS)
    kube.create(CLAIMS, samples.sample_claim(name="c", pool="p", namespace="ns"))
    seen = kube.deliver(0, claims.observe)
    cached = claims.cache.get(KEY)
    assert cached is not None
    await claims.apply(KEY, cached, Outcome(add_finalizer=names.CLAIM_FINALIZER))
    seen = kube.deliver(seen, claims.observe)
    kube.delete(CLAIMS, "c", "ns")
    seen = kube.deliver(seen, claims.observe)
    deleting = claims.cache.get(KEY)
    assert deleting is not None
    await claims.apply(KEY, deleting, Outcome(remove_finalizer=names.CLAIM_FINALIZER))
    kube.deliver(seen, claims.observe)
    assert claims.cache.get(KEY) is None
    assert kept(claims) == EMPTY


# -- Controller.apply: the one implementation of the order of writes -------------------------


def stored_claim(kube: FakeKube, **meta: Any) -> dict[str, Any]:
    body = samples.sample_claim(name="c", pool="p", namespace="ns")
    body["metadata"].update(meta)
    kube.create(CLAIMS, body)
    return kube.stored(CLAIMS, "c", "ns")


@pytest.mark.req("CL-001")
async def test_apply_adds_the_finalizer_alone_with_the_resource_version_lock() -> None:
    kube = FakeKube()
    body = stored_claim(kube)
    recorder = RecordingRecorder()
    claims = Controller("c", CLAIMS, never, kube=kube, recorder=recorder, workers=1)
    outcome = Outcome(add_finalizer=names.CLAIM_FINALIZER, status={"phase": "Bound"})
    outcome.event(EventType.NORMAL, "Bound", "not yet")

    assert await claims.apply(KEY, body, outcome) == 0.0  # the next reconcile sees it stored

    [(_, _, patch, subresource)] = kube.patches  # nothing else rides on it
    assert subresource is None
    assert patch == {
        "metadata": {
            "finalizers": [names.CLAIM_FINALIZER],
            "resourceVersion": body["metadata"]["resourceVersion"],
        }
    }
    assert "status" not in kube.stored(CLAIMS, "c", "ns")
    assert recorder.posted == []


@pytest.mark.req("CL-002")
async def test_apply_writes_status_only_on_the_version_read() -> None:
    kube = FakeKube()
    body = stored_claim(kube, finalizers=[names.CLAIM_FINALIZER])
    claims = controller(kube, CLAIMS)
    outcome = Outcome(status={"phase": "Bound", "leaseID": "l1"})
    outcome.requeue(30.0)

    assert await claims.apply(KEY, body, outcome) == 30.0

    [(_, _, patch, subresource)] = kube.patches
    assert (subresource, patch) == (
        "status",
        {
            "status": {"phase": "Bound", "leaseID": "l1"},
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
        },
    )
    stored = kube.stored(CLAIMS, "c", "ns")
    assert stored["status"]["leaseID"] == "l1"
    assert claims.cache.get(KEY) == stored


async def test_apply_keeps_the_reconciles_requeue_when_only_status_moved() -> None:
    kube = FakeKube()
    body = stored_claim(kube, finalizers=[names.CLAIM_FINALIZER])
    claims = controller(kube, CLAIMS)
    outcome = Outcome(status={"phase": "Bound"})
    outcome.requeue(30.0)
    assert await claims.apply(KEY, body, outcome) == 30.0
    # The write's echo queues nothing either: the reconcile asked for its own follow-up.
    kube.deliver(1, claims.observe)
    assert not claims.queue.pending(KEY)


async def test_apply_stops_at_a_conflict_and_leaves_the_stored_object_alone() -> None:
    kube = FakeKube()
    stale = stored_claim(kube)
    kube.patch_now(CLAIMS, "c", {"metadata": {"labels": {"x": "y"}}}, "ns")  # moved on
    claims = controller(kube, CLAIMS)
    before = kube.stored(CLAIMS, "c", "ns")
    assert await claims.apply(KEY, stale, Outcome(add_finalizer=names.CLAIM_FINALIZER)) is None
    assert kube.stored(CLAIMS, "c", "ns") == before


@pytest.mark.req("CL-002")
async def test_a_status_write_over_a_change_made_meanwhile_is_refused_and_retried() -> None:
    kube = FakeKube()
    read = stored_claim(kube)
    claims = controller(kube, CLAIMS)
    outcome = Outcome(status={"leaseID": "l-1"}, requeue_after=5.0)
    kube.patch_now(CLAIMS, "c", {"metadata": {"labels": {"x": "y"}}}, "ns")  # moved on
    requeue = await claims.apply(KEY, read, outcome)
    assert requeue == LOCKED_STATUS_CONFLICT_RETRY_SECONDS, "again soon, event or not"
    assert "status" not in kube.stored(CLAIMS, "c", "ns")

    now = kube.stored(CLAIMS, "c", "ns")
    outcome = Outcome(status={"leaseID": "l-1"}, requeue_after=5.0)
    assert await claims.apply(KEY, now, outcome) == 5.0
    assert kube.stored(CLAIMS, "c", "ns")["status"] == {"leaseID": "l-1"}


async def test_an_outcome_that_backs_off_writes_its_status_and_answers_backoff() -> None:
    """Not the immediate reconcile a status write otherwise asks for (its echo queues nothing):
    the work queue's backoff for the object (a Pool battery did not answer)."""
    kube = FakeKube()
    read = stored_claim(kube)
    claims = controller(kube, CLAIMS)
    outcome = Outcome(status={"phase": "Pending"})
    outcome.back_off()
    assert await claims.apply(KEY, read, outcome) is Retry.BACKOFF
    assert kube.stored(CLAIMS, "c", "ns")["status"] == {"phase": "Pending"}
    now = kube.stored(CLAIMS, "c", "ns")
    assert await claims.apply(KEY, now, Outcome(status={"phase": "Pending"})) == 0.0


async def test_apply_to_an_object_that_is_gone_forgets_it() -> None:
    kube = FakeKube()
    body = stored_claim(kube)
    claims = controller(kube, CLAIMS)
    kube.deliver(0, claims.observe)
    kube.delete(CLAIMS, "c", "ns")  # no finalizer: gone at once; the watch has not said so
    outcome = Outcome(status={"phase": "Pending"})
    assert await claims.apply(KEY, body, outcome) is None
    assert claims.cache.get(KEY) is None
    assert kept(claims) == EMPTY


@pytest.mark.req("CL-020")
async def test_apply_removes_the_finalizer_last_locked_to_the_status_writes_answer() -> None:
    kube = FakeKube()
    stored_claim(kube, finalizers=[names.CLAIM_FINALIZER])
    kube.delete(CLAIMS, "c", "ns")
    body = kube.stored(CLAIMS, "c", "ns")
    recorder = RecordingRecorder()
    claims = Controller("c", CLAIMS, never, kube=kube, recorder=recorder, workers=1)
    outcome = Outcome(status={"phase": "Released"}, remove_finalizer=names.CLAIM_FINALIZER)
    outcome.event(EventType.NORMAL, "Released", "released")

    await claims.apply(KEY, body, outcome)

    status_write, finalizer_write = kube.patches
    assert status_write[3] == "status"
    after_status = next(e.object for e in kube.events if e.object.get("status"))
    assert finalizer_write[2] == {
        "metadata": {
            "finalizers": [],
            "resourceVersion": after_status["metadata"]["resourceVersion"],
        }
    }
    assert recorder.posted == [("c", "Normal", "Released")]
    assert kube.gone[("microvmclaims", "ns", "c")]["status"] == {"phase": "Released"}
    assert claims.cache.get(KEY) is None
