from batteryop.operator.runtime import ObjectCache, changed_besides_status


def body(rv: str, phase: str = "") -> dict[str, object]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "resourceVersion": rv},
        "status": {"phase": phase},
    }


def test_the_echo_of_a_cached_write_stores_nothing_and_so_queues_nothing() -> None:
    cache = ObjectCache()
    assert cache.put(body("5", "Bound"))  # our write's answer
    assert not cache.put(body("5", "Bound"))  # its watch event, the same version
    assert not cache.put(body("4", "Pending"))  # an older event, late
    assert cache.get(("ns", "c")) == body("5", "Bound")
    assert cache.put(body("6", "Expired"))  # somebody's newer write
    assert cache.get(("ns", "c")) == body("6", "Expired")


def test_a_status_write_answer_is_a_change_only_if_more_than_status_moved() -> None:
    before = {**body("5", "Pending"), "spec": {"renewTime": "t1"}}
    ours = {**body("6", "Bound"), "spec": {"renewTime": "t1"}}
    ours["metadata"]["managedFields"] = [{"manager": "battery-operator"}]  # type: ignore[index]
    assert not changed_besides_status(before, ours)
    # The Holder renewed (or deleted the claim) just before the unlocked status write landed.
    renewed = {**body("6", "Bound"), "spec": {"renewTime": "t2"}}
    assert changed_besides_status(before, renewed)
    deleting = {**body("6", "Bound"), "spec": {"renewTime": "t1"}}
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"  # type: ignore[index]
    assert changed_besides_status(before, deleting)
