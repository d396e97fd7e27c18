"""The operator process's probes follow battery (DP-012)."""

from __future__ import annotations

import asyncio

import pytest
from integration.stack import Stack


async def wait_readyz(stack: Stack, code: int, within: float = 60) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    status, body = await stack.operator.readyz()
    while status != code:
        assert loop.time() < deadline, f"/readyz stayed {status}, wanted {code}: {body}"
        await asyncio.sleep(0.2)
        status, body = await stack.operator.readyz()
    return body


@pytest.mark.req("DP-012")
async def test_not_ready_while_battery_is_unavailable_and_ready_again_after(stack: Stack) -> None:
    assert "[+]battery ok" in await wait_readyz(stack, 200)
    await stack.battery.stop_listening()
    assert "[-]battery failed" in await wait_readyz(stack, 503)
    await stack.battery.resume_listening()
    await wait_readyz(stack, 200)
