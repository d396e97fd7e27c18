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

- the Node the operator's Pod runs on drained while claims are Bound on both Hosts and a
  prober makes claims: battery's volume is one every Node mounts (network storage's stand-in,
  `install.battery_volume`), so the Pod moves to the other Node and battery opens the same
  database; every Bound claim keeps its Lease and MicroVM, claims bind again through the moved
  Pod, and once the drained Host's claims are released the drain completes. When the old
  battery stopped and the new one started is printed (a real ReadWriteOnce volume attaches to
  one Node at a time; the stand-in does not, so their order is not asserted). (With node-local storage the Pod cannot move: see the
  Operations page.)

- a real Prometheus (`cluster.prometheus`: built from its pinned module, its targets found
  by Kubernetes service discovery)
  scrapes the operator, the host registry, the CSR approver and both Exec Agents, every target
  up; with the release's rules (each `for` shortened to `DRILL_HOLD`), a drill makes three
  alerts fire, each alone, for a fault the cluster confirms, and clear once it is fixed:
  BatteryHostNotReady (flintlockd killed on a Host), BatteryPoolExhausted (two claims on a Pool
  of one MicroVM that is replaced only when deleted), BatteryUnreachable (battery's container
  killed each time the kubelet starts it).

The drain's time from release to done, the operator Pod's move and the longest time with no
claim bound, the fault's times, and each alert's time from its fault to firing and from its fix
to cleared are printed for the closing note.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    Prober,
    apply,
    bound_at,
    claim_statuses,
    install_release,
    kube,
    make_demo,
    pods,
    publish_host_and_place_pool,
    ready_pool,
    start_drain,
    wait_published,
)
from cluster.prometheus import (
    DRILL_HOLD,
    INTERVAL,
    JOB,
    SCRAPED_PORTS,
    CrashLoop,
    Prometheus,
    Timing,
    clear,
    fire,
    host_report,
    scraped_containers,
)

from batteryop.api import names, samples
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimReason,
    HostReportReason,
    PoolConditionType,
    PoolReason,
)
from batteryop.api.pool import ReplenishmentType
from batteryop.client import Claim, Client, HostNotReadyError
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import PODS
from batteryop.manifests import exec_agent
from batteryop.manifests.render import BATTERY_CONTAINER, OPERATOR_CONTAINER
from batteryop.testing.host_registry_env import until_listed
from batteryop.testing.kubenode import faults, hostboot, install
from batteryop.testing.kubenode.node import KubeNode, Member

NODES = 2
"""conftest's `node` fixture starts this many Nodes for this module."""
POOL = "demo"
SIZE = 4
LEASE = {"expiryThreshold": "10m"}


@pytest.fixture(scope="module")
def installed(node: KubeNode) -> install.Installed:
    return install_release(node, storage="any-node")


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


def connects(address: str, member: Member | None = None, uid: int = 0) -> bool:
    """Whether a TCP connection to flintlockd's port on `address`, from `member`'s own network
    (the machine's when None) as `uid`, opens within 5 s (a dropped SYN times out; a reset
    fails at once)."""
    probe = f"exec 3<>/dev/tcp/{address}/{names.FLINTLOCKD_PORT}"
    argv = ["timeout", "5", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    argv += ["bash", "-c", probe]
    done = subprocess.run(
        member.ns.enter(argv) if member else argv, capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.req("TD-118", "HI-067", "HI-069", "HI-070")
def test_flintlockd_serves_on_network_shs_address_behind_the_hosts_firewall(
    node: KubeNode, installed: install.Installed
) -> None:
    for member in node.members:  # HI-067: network.sh wrote the Host's own address
        assert hostboot.written(member, "BATTERY_FLINTLOCKD_ENV")["FLINTLOCKD_ADDRESS"] == (
            member.address
        )
    first = node.members[0]
    # HI-069: off the Host, only FLINTLOCKD_CLIENT_CIDRS (the Pods, which reach it: above, and
    # the Nodes): the machine, on the Nodes' network but not a Node, is dropped.
    assert not connects(first.address)
    # HI-070: on the Host, only the Exec Agent's UID connects.
    assert not connects(first.address, first)
    assert connects(first.address, first, uid=install.EXEC_AGENT_UID)


def operator_pod(node: KubeNode) -> dict:
    (pod,) = (p for p in pods(node) if p["metadata"]["name"].startswith(names.OPERATOR_DEPLOYMENT))
    return pod


def battery_state(pod: dict) -> dict:
    (status,) = (
        s for s in pod["status"].get("containerStatuses", []) if s["name"] == BATTERY_CONTAINER
    )
    return dict(status["state"])


async def operator_moved(
    node: KubeNode, old: str, to: str, listed: threading.Event
) -> tuple[dict, str | None]:
    """Until an operator Pod other than `old` runs Ready on Node `to` (listed, `listed` set,
    then watched); that Pod, and when `old`'s battery container finished, if its last status
    said (the kubelet reports the stopped containers before the Pod is removed)."""
    finished: list[str] = []

    def moved(found: dict[str, dict]) -> bool:
        listed.set()
        if old in found and "terminated" in (state := battery_state(found[old])):
            finished[:] = [state["terminated"]["finishedAt"]]
        return any(
            name != old
            and name.startswith(names.OPERATOR_DEPLOYMENT)
            and pod["spec"].get("nodeName") == to
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions", [])
            )
            for name, pod in found.items()
        )

    async with kube(node) as client:
        found = await until_listed(
            client, PODS, install.NAMESPACE, moved, timeout=300, what=f"the operator on {to}"
        )
    (pod,) = (p for n, p in found.items() if n != old and n.startswith(names.OPERATOR_DEPLOYMENT))
    return pod, (finished[0] if finished else None)


@pytest.mark.req("TD-121", "DP-002", "DP-003", "CL-030", by="own-fake")
def test_the_operators_pod_moves_off_its_drained_node_and_no_bound_claim_is_lost(
    node: KubeNode, client: Client, spread: dict[str, list[Claim]]
) -> None:
    old = operator_pod(node)
    home, other = sorted(node.members, key=lambda m: m.name != old["spec"]["nodeName"])
    on_home = claim_on(client, home, "home")
    on_other = claim_on(client, other, "other")
    before = {n: (s["leaseID"], s["microVM"]["uid"]) for n, s in bound(node).items()}
    assert {on_home.name, on_other.name} <= set(before)
    listed = threading.Event()
    with Prober(node, POOL) as prober, ThreadPoolExecutor(1) as watcher:
        prober.bound_after(time.monotonic())  # binding works before the drain
        # Watched from before the drain, so the old Pod's last status is seen.
        moving = watcher.submit(
            asyncio.run, operator_moved(node, old["metadata"]["name"], other.name, listed)
        )
        assert listed.wait(60), "the operator's Pods were never listed"
        started = time.monotonic()
        draining, held = start_drain(
            node, home.name, "--ignore-daemonsets", "--delete-emptydir-data"
        )
        try:
            new, old_finished = moving.result(timeout=330)
            moved = time.monotonic() - started
            prober.bound_after(time.monotonic())  # a claim bound through the moved Pod
            # DP-002 on a real RWO volume: it attaches to one Node at a time, so the new battery
            # cannot open the database before the old one's Node lets it go. The stand-in
            # volume does not enforce that; the order is reported, not asserted.
            new_started = battery_state(new)["running"]["startedAt"]
            # Every claim that was Bound kept its Lease and MicroVM; the drained Host's claim
            # still runs commands through its own Host's agent.
            now = bound(node)
            assert {n: (now[n]["leaseID"], now[n]["microVM"]["uid"]) for n in before} == before
            assert home.address in host_address(on_home).split()
            assert other.address in host_address(on_other).split()
            released = time.monotonic()
            for info in client.claims():  # the drained Host's Holders give theirs back
                if info.node_name == home.name and not info.name.startswith("probe-"):
                    client.release(info.name)
            rest, _ = draining.communicate(timeout=300)
            assert draining.returncode == 0, rest
            drained = time.monotonic() - released
        finally:
            if draining.poll() is None:
                draining.kill()
            node.kubectl(["uncordon", home.name])
    assert prober.error is None, prober.error
    binds = sorted(b for _, b in prober.made)
    gaps = [b - a for a, b in itertools.pairwise(binds)]
    print(
        f"\ndrain of {home.name} (the operator's Node) held ({held!r}); the operator's Pod Ready "
        f"on {other.name} {moved:.1f} s after the drain began (old battery stopped at "
        f"{old_finished or 'an unreported time'}, new one started at {new_started}); "
        f"{len(prober.made)} probe claims, "
        f"longest time with no claim bound {max(gaps):.1f} s; the drain finished "
        f"{drained:.1f} s after its claims were released"
    )


def bound(node: KubeNode) -> dict[str, dict]:
    return {n: s for n, s in claim_statuses(node, "").items() if s.get("phase") == "Bound"}


@pytest.fixture(scope="module")
def prometheus(node: KubeNode, installed: install.Installed) -> Iterator[Prometheus]:
    with Prometheus.start(node, node.state / "prometheus") as running:
        yield running


@pytest.mark.req("TD-125", "DP-110", by="own-fake")
def test_prometheus_finds_every_component_through_the_api_server_and_scrapes_it(
    node: KubeNode, prometheus: Prometheus
) -> None:
    want = scraped_containers(node)
    assert {component for component, _ in want} == set(SCRAPED_PORTS)
    agents = {pod for component, pod in want if component == exec_agent.CONTAINER}
    assert len(agents) == len(node.members)  # one Exec Agent per Host, each its own target
    started = time.monotonic()

    def every_target_up() -> dict[tuple[str, str], dict] | None:
        found = {(t["labels"]["component"], t["labels"]["pod"]): t for t in prometheus.targets()}
        up = set(found) == want and all(t["health"] == "up" for t in found.values())
        return found if up else None

    found = prometheus.until("every component's target up", every_target_up, timeout=120)
    # Each Exec Agent is scraped on its own Host's address; the rest on their Pods'.
    for member in node.members:
        (agent,) = (
            t
            for (component, _), t in found.items()
            if component == exec_agent.CONTAINER and t["labels"]["node"] == member.name
        )
        assert agent["scrapeUrl"] == f"http://{member.address}:{exec_agent.HEALTH_PORT}/metrics"
    # Every scrape read samples: `up` is not merely a port that answered.
    samples = prometheus.value(f'count(scrape_samples_scraped{{job="{JOB}"}} > 0)')
    assert samples == len(want)
    print(
        f"\nPrometheus (Kubernetes service discovery, pod role) scrapes {len(found)} targets, "
        f"every one up {time.monotonic() - started:.1f} s after it started: "
        + ", ".join(sorted(f"{c} on {t['labels']['node']}" for (c, _), t in found.items()))
    )


def quiet(prometheus: Prometheus, what: str) -> None:
    """Until no alert is pending or firing (the drill's faults start from a quiet cluster)."""
    prometheus.until(f"no alert active {what}", lambda: not prometheus.alerts(), timeout=180)


def only(prometheus: Prometheus, alert: str) -> None:
    """The fault's alert is the only one active: it fired for this fault's reason."""
    assert set(prometheus.alerts()) == {alert}, prometheus.alerts()


@pytest.mark.req("TD-125", "DP-110", "EA-030", "PO-021", "CL-003", by="own-fake")
def test_three_alerts_fire_for_their_faults_and_clear_once_fixed(
    node: KubeNode, client: Client, prometheus: Prometheus
) -> None:
    everywhere = {m.name: f"{m.address}:{names.FLINTLOCKD_PORT}" for m in node.members}
    # The earlier tests' claims go: the demo Pool has MicroVMs free again.
    node.kubectl(["delete", "microvmclaims", "--all", "-n", DEMO_NAMESPACE, "--wait=false"])
    # A Pool of one MicroVM that is replaced only when deleted, not when leased: a claim beyond
    # the one it holds waits (the default ImmediateOnLease would boot another at once).
    alarm = samples.demo_pool("alarm", namespace=DEMO_NAMESPACE)
    alarm["spec"].update(size=1, replenishment={"type": str(ReplenishmentType.REPLACE_ON_DELETE)})
    apply(node, alarm)
    node.kubectl(
        ["wait", "-n", DEMO_NAMESPACE, "pool/alarm", "--for=condition=Ready", "--timeout=180s"]
    )
    quiet(prometheus, "before the drill")
    timings = []

    # 1. flintlockd on a Host dies: its Exec Agent reports the Host not ready.
    host, other = node.members[-1], node.members[0]
    timing = Timing("BatteryHostNotReady", f"flintlockd on {host.name} killed")
    flintlockd = node.procs.pop(host.proc("flintlockd"))
    fault = time.monotonic()
    flintlockd.popen.send_signal(signal.SIGKILL)
    flintlockd.popen.wait(timeout=30)
    alert = fire(prometheus, timing, fault, timeout=120)
    only(prometheus, timing.alert)
    assert float(alert["value"]) == 1  # one Host
    assert host_report(node, host.name) == (
        names.EXEC_AGENT_READY_FALSE,
        HostReportReason.FLINTLOCKD_NOT_READY,
    )
    assert host_report(node, other.name)[0] == names.EXEC_AGENT_READY_TRUE
    fixed = time.monotonic()
    install.start_flintlockd(node, host)  # as its unit's Restart= starts it again
    clear(prometheus, timing, fixed, timeout=120)
    timings.append(timing)
    print(f"\n{timing.line()}")
    asyncio.run(wait_published(node, everywhere))  # battery has both Hosts again
    quiet(prometheus, "after the Host came back")

    # 2. More claims than a Pool holds: the Pool is exhausted.
    timing = Timing("BatteryPoolExhausted", "two claims on a Pool of one MicroVM")
    fault = time.monotonic()
    apply(
        node,
        *(samples.sample_claim(f"alarm-{i}", "alarm", HOLDER, DEMO_NAMESPACE) for i in range(2)),
    )
    alert = fire(prometheus, timing, fault, timeout=120)
    only(prometheus, timing.alert)
    assert float(alert["value"]) == 1  # one Pool
    pool = json.loads(node.kubectl(["get", "pool", "alarm", "-n", DEMO_NAMESPACE, "-o", "json"]))
    (exhausted,) = (
        c for c in pool["status"]["conditions"] if c["type"] == PoolConditionType.EXHAUSTED
    )
    assert (exhausted["status"], exhausted["reason"]) == ("True", PoolReason.NONE_AVAILABLE)
    phases = sorted(
        (s.get("phase"), c["reason"])
        for s in claim_statuses(node, "alarm-").values()
        for c in s.get("conditions") or []
        if c["type"] == ClaimConditionType.BOUND
    )
    assert phases == [("Bound", ClaimReason.BOUND), ("Pending", ClaimReason.POOL_EXHAUSTED)]
    fixed = time.monotonic()  # the runbook's fix: a larger Pool
    grow = ["patch", "pool", "alarm", "-n", DEMO_NAMESPACE, "--type=merge"]
    node.kubectl([*grow, "-p", '{"spec":{"size":3}}'])
    clear(prometheus, timing, fixed, timeout=120)
    asyncio.run(bound_at(node, {"alarm-0", "alarm-1"}))
    timings.append(timing)
    print(f"\n{timing.line()}")
    quiet(prometheus, "after the Pool grew")

    # 3. battery crash-loops: the operator has no Events stream.
    timing = Timing("BatteryUnreachable", "battery's container killed at each start")
    with CrashLoop(node) as crashing:
        fault = time.monotonic()
        alert = fire(prometheus, timing, fault, timeout=180)
        only(prometheus, timing.alert)
        # The operator itself runs and is scraped: it is battery it cannot reach.
        assert prometheus.value(f'up{{component="{OPERATOR_CONTAINER}"}}') == 1
        assert float(alert["value"]) == 0  # no replica subscribed
        fixed = time.monotonic()
    assert crashing.error is None, crashing.error
    clear(prometheus, timing, fixed, timeout=180)
    timings.append(timing)
    quiet(prometheus, "after battery came back")
    print(
        f"\nthe alert drill (the release's expressions, every `for` {DRILL_HOLD}, scraped and "
        f"evaluated every {INTERVAL}; battery killed {crashing.kills} times):\n"
        + "\n".join(t.line() for t in timings)
    )


@pytest.mark.req("TD-113", by="own-fake")
def test_nothing_the_hosts_ran_sent_a_packet_off_the_machine(
    node: KubeNode, installed: install.Installed
) -> None:
    assert node.machine.dropped() == 0
