from batteryop.operator.runtime import ObjectCache


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
