"""Attack: a taken Exec Agent points battery at another Host's flintlockd (issue 43, Low).

The agent reports its Host's flintlockd address in an annotation of its own Node, and the
admission policy of EA-051 lets its identity write annotations under our prefix there: that is
its job (EA-035). So a taken agent credential can name another Host's flintlockd as its own,
and battery would send that Host's MicroVM work under this Host's name. What it cannot write
is its Node's status, where the kubelet reports the Node's InternalIP addresses. Driven here as
the agent's own Pod-bound token against the real API server with install.yaml's policy: the
write of the annotation is admitted, a write of the status is refused, and the host registry's
admission (`admit_all`, run on the Nodes as the API server holds them) refuses the Host whose
report names an address that is not its Node's (IN-108), with a detail a person can act on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.host_registry.admission import Refusal, admit_all
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.exec_agent_policy import (
    agent_on,
    hosts,
    install_exec_agent,
    policy_active,
    refusal,
)

VICTIM_IP = "10.0.0.5"
OWN_IP = "10.0.0.6"
VICTIM_FLINTLOCKD = f"{VICTIM_IP}:{names.FLINTLOCKD_PORT}"


@pytest.fixture
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        install_exec_agent(api)
        yield api
    finally:
        api.close()


def _report(address: str) -> dict[str, Any]:
    return {
        "metadata": {
            "annotations": {
                names.EXEC_AGENT_READY_ANNOTATION: names.EXEC_AGENT_READY_TRUE,
                names.FLINTLOCKD_ADDRESS_ANNOTATION: address,
            }
        }
    }


def _internal_ip(ip: str) -> dict[str, Any]:
    return {"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


@pytest.mark.controlplane
@pytest.mark.req("IN-108", "EA-051")
async def test_a_report_naming_another_hosts_flintlockd_is_refused(
    admin: k8s.ApiClient, controlplane: ControlPlane
) -> None:
    core = k8s.CoreV1Api(admin)
    with hosts(admin, 2) as (victim, own):
        # What the kubelets and the victim's own agent report.
        core.patch_node_status(victim, _internal_ip(VICTIM_IP))
        core.patch_node_status(own, _internal_ip(OWN_IP))
        core.patch_node(victim, _report(VICTIM_FLINTLOCKD))
        agent = agent_on(admin, controlplane, own)
        try:
            await policy_active(agent, own)
            # The attack: the agent's own credential names the victim's flintlockd. EA-051
            # admits it (annotations under our prefix on its own Node are the agent's report).
            k8s.CoreV1Api(agent).patch_node(own, _report(VICTIM_FLINTLOCKD))
            # It cannot make the address its Node's own: the status is the kubelet's (RBAC grants
            # the agent no nodes/status, and EA-051 would refuse the subresource too).
            assert "nodes/status" in refusal(
                lambda: k8s.CoreV1Api(agent).patch_node_status(own, _internal_ip(VICTIM_IP))
            )
        finally:
            agent.close()
        nodes = {
            name: admin.sanitize_for_serialization(core.read_node(name)) for name in (victim, own)
        }
    assert nodes[own]["metadata"]["annotations"][names.FLINTLOCKD_ADDRESS_ANNOTATION] == (
        VICTIM_FLINTLOCKD
    )
    for held in ({victim: VICTIM_FLINTLOCKD}, {}):
        verdicts = admit_all(nodes, held=held)
        assert verdicts[victim].address == VICTIM_FLINTLOCKD, verdicts
        assert not verdicts[own].is_host, verdicts
        assert verdicts[own].refusal is Refusal.ADDRESS_NOT_ON_NODE
        assert verdicts[own].detail == (
            f"'{VICTIM_FLINTLOCKD}', which is not one of the Node's InternalIP addresses "
            f"({OWN_IP})"
        )
