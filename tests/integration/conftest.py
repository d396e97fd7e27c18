"""The whole stack for integration tests (`batteryop.testing.localstack`), per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from integration.stack import Stack

from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.localstack import LocalStack, prepare_cluster


@pytest.fixture(scope="session")
def cluster(controlplane: ControlPlane) -> ControlPlane:
    prepare_cluster(controlplane)
    return controlplane


@pytest_asyncio.fixture
async def stack(cluster: ControlPlane, tmp_path: Path) -> AsyncIterator[Stack]:
    async with LocalStack.start(cluster, tmp_path) as local:
        api = admin_client(cluster)
        try:
            yield Stack(local, api)
        finally:
            api.close()
