"""install.yaml on two real Hosts, drained and used as a platform team does (issue 47, item 4).

The release's install.yaml goes onto a cluster of two Nodes, each joined by `kubeadm join` and
made a Host by the Host Image's boot steps (`KubeNode.start(nodes=2)`, `install.install`).
battery's volume is a local PersistentVolume on the first Node, as a cluster's node-local
storage is: the operator's Pod (battery beside it) runs there. Then, through the Python client
as a consumer uses it:

- the demo Pool spans both Hosts, claims land on both, and each claim's commands run through
  its own Host's Exec Agent and flintlockd (the command reports the Host's address);
- `kubectl drain` of the second Host is held by its drain guard while claims on it are Bound;
  claims on the first Host stay Bound on their Leases; a new claim lands on the first Host
  only; once the second Host's claims are released the drain completes;
- after `kubectl uncordon`, the second Host takes claims again;
- the second Host's kubelet and containerd killed: once its Node is not Ready, HostReady is
  false with reason `NodeNotReady` on its claim (still Bound), the Holder's client reports it,
  and the host registry gives battery only the first Host; both restarted, the Host is
  published again and takes claims.

The drain's time from release to done and the fault's times are printed for the closing note.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    claim_statuses,
    install_release,
    make_demo,
    publish_host_and_place_pool,
    ready_pool,
    start_drain,
    wait_published,
)

from batteryop.api import names
from batteryop.api.conditions import ClaimReason, HostReportReason
from batteryop.client import Claim, Client, HostNotReadyError
from batteryop.kube.config import KubeConfig
from batteryop.testing.kubenode import faults, install
from batteryop.testing.kubenode.node import KubeNode, Member

NODES = 2
"""conftest's `node` fixture starts this many Nodes for this module."""
POOL = "demo"
SIZE = 4
LEASE = {"expiryThreshold": "10m"}


@pytest.fixture(scope="module")
def installed(node: KubeNode) -> install.Installed:
    return install_release(node)


@pytest.fixture(scope="module")
def client(node: KubeNode, installed: install.Installed) -> Iterator[Client]:
    make_demo(node)
    with Client(
        namespace=DEMO_NAMESPACE,
        kube_config=KubeConfig.from_dict(node.cp.kubeconfig()),
        serving_ca=installed.pki.exec_serving_ca,
    ) as held:
        yield held


@pytest.fixture(scope="module")
def spread(node: KubeNode, client: Client) -> dict[str, list[Claim]]:
    """SIZE claims on the demo Pool, sized to SIZE over both Hosts; by Host."""
    publish_host_and_place_pool(node, POOL)
    ready_pool(node, POOL, SIZE, lease=LEASE)
    claims = [client.claim(POOL, HOLDER, name=f"spread-{i}", timeout=180) for i in range(SIZE)]
    return {m.name: [c for c in claims if c.node_name == m.name] for m in node.members}


def host_address(claim: Claim) -> str:
    """The addresses of the Host that ran the claim's command (flintlockd runs it in the
    Host's own network namespace)."""
    result = claim.exec(["hostname", "-I"], timeout_seconds=60)
    assert result.exit_code == 0, result
    return result.stdout.decode()


@pytest.mark.req("TD-120", "EA-064", "IN-001", by="own-fake")  # battery: the fake's image
def test_a_pool_spans_both_hosts_and_each_hosts_agent_runs_its_claims(
    node: KubeNode, spread: dict[str, list[Claim]]
) -> None:
    assert all(spread.values()), {h: [c.name for c in cs] for h, cs in spread.items()}
    for member in node.members:
        claim = spread[member.name][0]
        assert claim.agent_address == f"{member.address}:{names.EXEC_AGENT_PORT}"
        assert member.address in host_address(claim).split()


@pytest.mark.req("TD-120", "EA-040", "EA-041", by="own-fake")
def test_a_drain_holds_while_its_claims_are_bound_and_spares_the_other_host(
    node: KubeNode, client: Client, spread: dict[str, list[Claim]]
) -> None:
    first, second = node.members
    before = claim_statuses(node, "spread-")
    # The second Host's agent keeps its drain guard while claims there are Bound.
    draining, held = start_drain(node, second.name, "--ignore-daemonsets", "--delete-emptydir-data")
    try:
        # A claim made now lands on the Host that is not cordoned.
        late = client.claim(POOL, HOLDER, name="during-drain", timeout=180)
        assert late.node_name == first.name
        # The first Host's claims kept their Leases and MicroVMs throughout.
        now = claim_statuses(node, "spread-")
        for claim in spread[first.name]:
            assert now[claim.name]["phase"] == "Bound"
            assert now[claim.name]["leaseID"] == before[claim.name]["leaseID"]
            assert first.address in host_address(claim).split()
        released = time.monotonic()
        for claim in spread[second.name]:
            claim.release()
        rest, _ = draining.communicate(timeout=300)
        assert draining.returncode == 0, rest
        print(
            f"\ndrain of {second.name} held ({held!r}); it finished "
            f"{time.monotonic() - released:.1f} s after its claims were released"
        )
    finally:
        if draining.poll() is None:
            draining.kill()
        node.kubectl(["uncordon", second.name])


@pytest.mark.req("TD-120", by="own-fake")
def test_an_uncordoned_host_takes_claims_again(node: KubeNode, client: Client) -> None:
    second = node.members[1]
    claim = claim_on(client, second, "after-uncordon")
    assert second.address in host_address(claim).split()


def claim_on(
    client: Client,
    member: Member,
    prefix: str,
    on_host_not_ready: Callable[[HostNotReadyError], None] | None = None,
) -> Claim:
    """Claims on the demo Pool until one lands on `member` (battery places by its own count);
    that one."""
    for i in range(2 * SIZE):
        claim = client.claim(
            POOL, HOLDER, name=f"{prefix}-{i}", timeout=180, on_host_not_ready=on_host_not_ready
        )
        if claim.node_name == member.name:
            return claim
    pytest.fail(f"no claim of {2 * SIZE} landed on {member.name}")


def wait_host_ready(node: KubeNode, claim: Claim, reason: str, timeout: int = 240) -> None:
    """Until the claim's HostReady reason is `reason` (kubectl watches)."""
    path = '{.status.conditions[?(@.type=="HostReady")].reason}'
    node.kubectl(
        [
            "wait",
            "-n",
            DEMO_NAMESPACE,
            f"microvmclaim/{claim.name}",
            f"--for=jsonpath={path}={reason}",
            f"--timeout={timeout}s",
        ]
    )


@pytest.mark.req("TD-120", "CL-105", "IN-110", "CC-013", by="own-fake")
def test_a_host_whose_kubelet_and_containerd_died_is_not_ready_until_they_are_back(
    node: KubeNode, client: Client
) -> None:
    first, second = node.members
    told: list[HostNotReadyError] = []
    reported = threading.Event()

    def host_not_ready(error: HostNotReadyError) -> None:
        told.append(error)
        reported.set()

    held = claim_on(client, second, "runtime", on_host_not_ready=host_not_ready)
    killed = time.monotonic()
    faults.kill_runtime(node, second)
    wait_host_ready(node, held, ClaimReason.NODE_NOT_READY)
    not_ready = time.monotonic() - killed
    # The Holder's client says so, with the reason.
    assert reported.wait(120), "the client never reported the Host not ready"
    assert told[0].reason == ClaimReason.NODE_NOT_READY
    # battery is given only the Host that is still ready; the claim is still held.
    asyncio.run(wait_published(node, {first.name: f"{first.address}:{names.FLINTLOCKD_PORT}"}))
    unpublished = time.monotonic() - killed
    assert claim_statuses(node, held.name)[held.name]["phase"] == "Bound"
    faults.restart_runtime(node, second)  # until the Node is Ready again
    wait_host_ready(node, held, HostReportReason.READY)
    asyncio.run(
        wait_published(node, {m.name: f"{m.address}:{names.FLINTLOCKD_PORT}" for m in node.members})
    )
    back = time.monotonic() - killed
    assert second.address in host_address(claim_on(client, second, "revived")).split()
    print(
        f"\n{second.name}'s kubelet and containerd killed: HostReady false after "
        f"{not_ready:.1f} s, out of battery's Hosts after {unpublished:.1f} s; restarted, "
        f"published again {back:.1f} s after the kill"
    )


@pytest.mark.req("TD-113", by="own-fake")
def test_nothing_the_hosts_ran_sent_a_packet_off_the_machine(
    node: KubeNode, installed: install.Installed
) -> None:
    assert node.machine.dropped() == 0
