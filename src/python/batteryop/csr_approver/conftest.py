"""The `cluster` fixture of the approver's tests: the approver's world of
`batteryop.testing.fixtures.csr_cluster` (see `batteryop.testing.csr_approver_env`)."""

from __future__ import annotations

import pytest

from batteryop.testing.csr_approver_env import Cluster
from batteryop.testing.fixtures import csr_cluster  # noqa: F401 (a fixture, found by name)


@pytest.fixture
def cluster(csr_cluster: Cluster) -> Cluster:  # noqa: F811 (the fixture, as a parameter)
    return csr_cluster
