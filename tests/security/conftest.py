"""Fixtures shared by the security suite (`batteryop.testing.fixtures`; the control plane comes
from the project's plugin): the Exec Agent's world and the CSR approver's."""

from batteryop.testing.fixtures import (  # noqa: F401 (fixtures, found by pytest by name)
    agent,
    agent_identity,
    cluster,
    csr_cluster,
    flintlockd,
    holders,
    pki,
)
