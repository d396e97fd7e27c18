"""Fixtures of the agent's tests (`batteryop.testing.fixtures`): the real control plane
(prepared once per session), a PKI per test, a fake flintlockd process with mutual TLS, the agent
as a real TLS gRPC server acting as its own ServiceAccount, `holders` in a fresh namespace, and
the CSR approver's `csr_cluster`."""

from batteryop.testing.fixtures import (  # noqa: F401 (fixtures, found by pytest by name)
    agent,
    agent_identity,
    cluster,
    csr_cluster,
    flintlockd,
    holders,
    pki,
)
