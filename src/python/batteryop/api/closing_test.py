"""Tests of `AsyncClosing`."""

from __future__ import annotations

import pytest

from batteryop.api.closing import AsyncClosing


class Resource(AsyncClosing):
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_async_with_gives_the_object_and_closes_it_on_the_way_out() -> None:
    async with Resource() as resource:
        assert resource.closed == 0
    assert resource.closed == 1


async def test_it_closes_when_the_block_raises_and_lets_the_error_through() -> None:
    resource = Resource()
    with pytest.raises(RuntimeError, match="boom"):
        async with resource:
            raise RuntimeError("boom")
    assert resource.closed == 1
