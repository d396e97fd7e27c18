"""One local stack per test module (`batteryop.devstack.stack.Stack`), from the pexes that
`runtime_package_dependencies` puts into the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from batteryop.devstack.stack import Stack, running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with running(tmp_path_factory.mktemp("devstack"), Path(".")) as up:
        print(
            f"\nstack up in {up.timings['up']:.1f}s: "
            + ", ".join(f"{k} {v:.1f}s" for k, v in up.timings.items())
        )
        yield up
