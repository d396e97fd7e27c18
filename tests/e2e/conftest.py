"""One local stack per test module (`batteryop.devstack.stack.Stack`), from the pexes that
`runtime_package_dependencies` puts into the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from batteryop.devstack.artifacts import Artifacts
from batteryop.devstack.stack import Stack
from batteryop.devstack.state import StateDir


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("devstack")
    state = StateDir(root / "state")
    state.claim()
    up = Stack(state, root / "logs", Artifacts.find(Path(".")), host_count=2)
    try:
        await up.up()
        print(
            f"\nstack up in {up.timings['up']:.1f}s: "
            + ", ".join(f"{k} {v:.1f}s" for k, v in up.timings.items())
        )
        yield up
    finally:
        up.down()
