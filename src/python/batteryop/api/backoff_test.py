"""Tests of the one backoff."""

from __future__ import annotations

import random

import pytest

from batteryop.api.backoff import Backoff


def test_waits_double_to_the_maximum_and_start_over_after_a_reset() -> None:
    backoff = Backoff(1.0, 30.0)
    assert [backoff.next() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    backoff.reset()
    assert backoff.next() == 1.0
    assert backoff.delay(10_000) == 30.0  # a long outage does not overflow
    assert Backoff(1.0, 0.5).next() == 0.5  # a maximum below the minimum caps every wait


def test_a_factor_and_small_steps_keep_their_numbers() -> None:
    backoff = Backoff(0.05, 2.0)
    assert [backoff.next() for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert Backoff(1.0, 100.0, factor=3.0).delay(2) == 9.0


def test_jitter_spreads_each_wait_and_never_passes_the_maximum() -> None:
    rng = random.Random(7)
    backoff = Backoff(1.0, 30.0, jitter=0.2, rng=rng)
    for attempt in range(8):
        base = min(30.0, 2.0**attempt)
        assert base * 0.8 <= backoff.delay(attempt) <= min(30.0, base * 1.2)
    assert len({backoff.delay(3) for _ in range(20)}) > 1


@pytest.mark.parametrize(
    ("minimum", "maximum", "factor", "jitter"),
    [(-1.0, 1.0, 2.0, 0.0), (1.0, 2.0, 0.5, 0.0), (1.0, 2.0, 2.0, 1.5)],
)
def test_bounds_that_make_no_backoff_are_refused(
    minimum: float, maximum: float, factor: float, jitter: float
) -> None:
    with pytest.raises(ValueError):
        Backoff(minimum, maximum, factor=factor, jitter=jitter)
