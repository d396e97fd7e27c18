"""`wait_until` returns the first reading that holds and says what never did."""

from __future__ import annotations

import pytest

from batteryop.testing.polling import ConditionTimeoutError, wait_until


async def test_the_first_reading_that_holds_is_returned() -> None:
    readings = iter([0, 1, 2])
    read: list[int] = []

    async def probe() -> int:
        read.append(next(readings))
        return read[-1]

    assert await wait_until(probe, lambda n: n >= 1, what="one", interval=0) == 1
    assert read == [0, 1]  # no reading after the one that held


async def test_a_condition_that_never_holds_names_what_and_the_last_reading() -> None:
    async def page() -> str:
        return "x_depth 0.0\nx_up 1.0\n"

    with pytest.raises(ConditionTimeoutError) as err:
        await wait_until(page, lambda text: "x_depth 1.0" in text, what="deep", within=0)
    assert (
        str(err.value) == "timed out after 0s waiting for deep; last seen:\nx_depth 0.0\nx_up 1.0\n"
    )
    assert isinstance(err.value, TimeoutError) and err.value.last == await page()

    async def empty() -> set[str]:
        return set()

    with pytest.raises(ConditionTimeoutError, match=r"waiting for drained; last seen: set\(\)$"):
        await wait_until(empty, bool, what="drained", within=0)
