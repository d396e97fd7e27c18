from __future__ import annotations

from batteryop.operator.pools.backoff import Backoff


def test_waits_double_from_one_second_to_thirty_and_reset_per_key() -> None:
    backoff = Backoff()
    assert [backoff.next_delay("a") for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.next_delay("b") == 1.0, "per key"
    backoff.reset("a")
    assert backoff.waits("a") == 0
    assert backoff.next_delay("a") == 1.0
    for _ in range(100):
        backoff.next_delay("c")
    assert backoff.next_delay("c") == 30.0
