"""install.yaml installed as a user installs it, on a real node (issue 23).

A real one-node cluster (`batteryop.testing.kubenode`: the test API server, the kubelet,
containerd, runc, kube-proxy, CoreDNS, the scheduler and the controller manager) takes the
release's `install.yaml` through `kubectl apply -k`, with the release's images mirrored into
the node's registry; the Node is made a Host by the Host Image's own boot steps. Then:

- every workload becomes ready, each container runs the image install.yaml pins by digest,
  battery's database sits on the bound PersistentVolumeClaim;
- the Exec Agent Pod gets flintlockd's certificate through the CSR approver Pod, flintlockd
  starts on it, the host registry Pod publishes the Host to battery, a Pool is placed on it,
  and `battery run` from a clean venv with the released wheel runs `uname -a` through the
  agent Pod;
- nothing the node ran sent a packet off the machine, and the machine is as it was after.

The figures (cold build, `kubectl apply` to every workload ready, one claim at a time through
the installed operator) are printed for the closing note and the docs.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from batteryop.api import names, samples
from batteryop.client.wheel_test import make_venv, pip_install, pyenv_python, the_wheel
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CLAIMS, CONFIGMAPS
from batteryop.manifests import render
from batteryop.testing.host_registry_env import published, until_listed
from batteryop.testing.kubenode import binaries, install
from batteryop.testing.kubenode.machine import NODE_ADDRESS
from batteryop.testing.kubenode.node import NODE_NAME, KubeNode, kubectl_binary

IMAGES = ("battery-operator", "exec-agent", "csr-approver", "host-registry", install.FAKE_BATTERY)
IMAGE_DIR = Path("images")
INSTALL_YAML = Path("release/install.yaml")
DEMO_NAMESPACE = "demo"
HOLDER = "sandbox"
POOL = "demo"
ROUNDS = 20


@pytest.fixture(scope="module")
def node() -> Iterator[KubeNode]:
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (namespaces, cgroups, nftables)")
    missing = binaries.missing_tools()
    if missing:
        pytest.skip(f"the real node needs Debian's {', '.join(missing)}")
    started = time.monotonic()
    with KubeNode.start() as running:
        print(
            f"\nreal node: binaries ready in {running.timings['build']:.1f} s, "
            f"cluster up in {running.timings['start']:.1f} s "
            f"(total {time.monotonic() - started:.1f} s)"
        )
        yield running
    # __exit__ raised if the machine was not put back (TD-113)


@pytest.fixture(scope="module")
def installed(node: KubeNode) -> install.Installed:
    layouts = {name: IMAGE_DIR / name for name in IMAGES}
    missing = [n for n, p in layouts.items() if not (p / "index.json").is_file()]
    assert not missing, f"the release images were not built: {missing}"
    done = install.install(node, INSTALL_YAML, layouts)
    times = done.times
    print(
        f"\ninstall.yaml: images mirrored in {times['mirror']:.1f} s; "
        f"`kubectl apply -k` to every workload ready: {times['apply_to_ready']:.1f} s"
    )
    print(done.applied)
    print(node.kubectl(["get", "pods", "-n", install.NAMESPACE, "-o", "wide"]))
    return done


def pods(node: KubeNode, namespace: str = install.NAMESPACE) -> list[dict]:
    return list(json.loads(node.kubectl(["get", "pods", "-n", namespace, "-o", "json"]))["items"])


def pinned_digests() -> dict[str, str]:
    """Repository -> digest, for every image install.yaml pins (DP-032)."""
    found = {}
    for doc in yaml.safe_load_all(INSTALL_YAML.read_text()):
        for spec in _pod_specs(doc):
            for container in spec.get("containers", []):
                name, _, digest = container["image"].partition("@")
                if digest:
                    found[name.rsplit(":", 1)[0]] = digest
    return found


def _pod_specs(doc: dict | None) -> list[dict]:
    if not doc or doc.get("kind") not in ("Deployment", "DaemonSet"):
        return []
    return [doc["spec"]["template"]["spec"]]


@pytest.mark.req("TD-112", "TD-114", "DP-001", "DP-003", "DP-032")
def test_every_workload_of_install_yaml_runs_ready_on_the_node(
    node: KubeNode, installed: install.Installed
) -> None:
    running = pods(node)
    assert running, "no Pod in the install namespace"
    seen: set[str] = set()
    for pod in running:
        assert pod["spec"]["nodeName"] == NODE_NAME
        statuses = pod["status"].get("containerStatuses", [])
        assert statuses and all(s["ready"] for s in statuses), (pod["metadata"]["name"], statuses)
        seen.update(s["imageID"].rsplit("@", 1)[-1] for s in statuses)
    # What runs is what install.yaml pins: the mirror kept every digest (DP-032).
    ours = {repo: d for repo, d in pinned_digests().items() if repo != install.POOLMGRD}
    assert len(ours) == len(IMAGES) - 1
    assert set(ours.values()) <= seen, (ours, seen)
    operator = next(
        p for p in running if p["metadata"]["name"].startswith(names.OPERATOR_DEPLOYMENT)
    )
    assert {c["name"] for c in operator["spec"]["containers"]} >= {"operator", "battery"}  # DP-001
    claim = json.loads(
        node.kubectl(["get", "pvc", names.BATTERY_DATA_PVC, "-n", install.NAMESPACE, "-o", "json"])
    )
    assert claim["status"]["phase"] == "Bound"  # DP-003
    assert claim["spec"]["volumeName"] == install.BATTERY_VOLUME
    assert any((node.state / "volumes" / install.BATTERY_VOLUME).iterdir()), "battery wrote nothing"


async def wait_published(node: KubeNode, want: dict[str, str], timeout: float = 180.0) -> None:
    """Until the host registry's Host set on battery's ConfigMap is `want` (watched)."""
    async with KubeClient(KubeConfig.from_dict(node.cp.kubeconfig()), user_agent="tests") as kube:
        await until_listed(
            kube,
            CONFIGMAPS,
            install.NAMESPACE,
            lambda found: published(found.get(names.BATTERY_CONFIG_MAP)) == want,
            timeout=timeout,
            field_selector=f"metadata.name={names.BATTERY_CONFIG_MAP}",
            what=f"the Host set {want}",
        )


def battery_env(node: KubeNode, pki: install.Pki, tmp: Path) -> dict[str, str]:
    ca = tmp / "serving-ca.crt"
    ca.write_bytes(pki.serving_ca.cert_pem)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "KUBECONFIG": str(node.cp.admin_kubeconfig),
        "BATTERY_NAMESPACE": DEMO_NAMESPACE,
        "BATTERY_HOLDER": HOLDER,
        "BATTERY_CA": str(ca),
    }


@pytest.fixture(scope="module")
def demo(node: KubeNode, installed: install.Installed) -> str:
    """The claims' namespace and their Holder."""
    node.kubectl(["create", "namespace", DEMO_NAMESPACE])
    node.kubectl(["create", "serviceaccount", HOLDER, "-n", DEMO_NAMESPACE])
    return DEMO_NAMESPACE


@pytest.mark.req("TD-115", "IN-001", "EA-064")
def test_the_node_is_a_host_and_battery_run_reaches_its_agent_pod(
    node: KubeNode, installed: install.Installed, demo: str, tmp_path: Path
) -> None:
    # The host registry Pod publishes the Node, at its address, as battery's one Host, once
    # its agent has reported it ready for the settle time install.yaml gives (IN-001, IN-011).
    want = {NODE_NAME: f"{NODE_ADDRESS}:{names.FLINTLOCKD_PORT}"}
    started = time.monotonic()
    try:
        asyncio.run(wait_published(node, want))
    except AssertionError as err:
        node_yaml = node.kubectl(["get", "node", NODE_NAME, "-o", "yaml"], check=False)
        raise AssertionError(f"{err}\n{install.diagnose(node, 40)}\n{node_yaml}") from None
    print(f"\nthe host registry Pod published the Host after {time.monotonic() - started:.1f} s")
    config = json.loads(
        node.kubectl(
            ["get", "configmap", names.BATTERY_CONFIG_MAP, "-n", install.NAMESPACE, "-o", "json"]
        )
    )
    hosts = json.loads(config["data"][render.CONFIG_KEY])["hosts"]
    assert [(h["name"], h["address"]) for h in hosts] == list(want.items())
    node.kubectl(
        ["apply", "-f", "-"],
        stdin=yaml.safe_dump(samples.demo_pool(POOL, namespace=DEMO_NAMESPACE)),
    )
    node.kubectl(
        ["wait", "-n", DEMO_NAMESPACE, f"pool/{POOL}", "--for=condition=Ready", "--timeout=180s"]
    )
    python = pyenv_python("3.11")
    assert python is not None, "pyenv's CPython 3.11 (Pants runs on pyenv) is missing"
    bin_dir = make_venv(python, tmp_path / "venv")
    installed_wheel = pip_install(bin_dir, the_wheel())
    assert installed_wheel.returncode == 0, installed_wheel.stderr[-2000:]
    env = battery_env(node, installed.pki, tmp_path)
    started = time.monotonic()
    proc = subprocess.run(
        [str(bin_dir / "battery"), "run", POOL, "--", "uname", "-a"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Linux "), proc.stdout
    print(f"\n`battery run {POOL} -- uname -a` through the agent Pod: {took:.2f} s\n{proc.stdout}")


BURST = 30


def kube(node: KubeNode) -> KubeClient:
    return KubeClient(KubeConfig.from_dict(node.cp.kubeconfig()), user_agent="tests")


async def bound_at(node: KubeNode, claims: set[str], timeout: float = 300.0) -> dict[str, float]:
    """When (monotonic) each of `claims` was first seen Bound, watched until all are."""
    seen: dict[str, float] = {}

    def check(found: dict[str, dict]) -> bool:
        for name, body in found.items():
            if name in claims and (body.get("status") or {}).get("phase") == "Bound":
                seen.setdefault(name, time.monotonic())
        return claims <= set(seen)

    async with kube(node) as client:
        await until_listed(
            client,
            CLAIMS,
            DEMO_NAMESPACE,
            check,
            timeout=timeout,
            what=f"claims {sorted(claims)} Bound",
        )
    return seen


def apply(node: KubeNode, *objects: dict) -> None:
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(objects))


def ready_pool(node: KubeNode, name: str, size: int) -> None:
    pool = samples.demo_pool(name, namespace=DEMO_NAMESPACE)
    pool["spec"]["size"] = size
    apply(node, pool)
    node.kubectl(
        ["wait", "-n", DEMO_NAMESPACE, f"pool/{name}", "--for=condition=Ready", "--timeout=180s"]
    )


def claim_statuses(node: KubeNode, prefix: str) -> dict[str, dict]:
    items = json.loads(node.kubectl(["get", "microvmclaims", "-n", DEMO_NAMESPACE, "-o", "json"]))
    return {
        c["metadata"]["name"]: c.get("status") or {}
        for c in items["items"]
        if c["metadata"]["name"].startswith(prefix)
    }


def battery_leases(node: KubeNode) -> dict[str, str]:
    """Lease id -> MicroVM uid, as battery's database on its volume holds them (BA-060)."""
    db = node.state / "volumes" / install.BATTERY_VOLUME / "poolmgr.db"
    state = json.loads(db.read_text().splitlines()[1])
    return {row["lease_id"]: row["vm_uid"] for row in state["leases"]}


def wait_restarted(node: KubeNode, pod: str, container: str, restarts: int) -> None:
    """Until the kubelet reports `container` of `pod` restarted `restarts` times (watched)."""
    path = f'{{.status.containerStatuses[?(@.name=="{container}")].restartCount}}'
    node.kubectl(
        [
            "wait",
            "-n",
            install.NAMESPACE,
            f"pod/{pod}",
            f"--for=jsonpath={path}={restarts}",
            "--timeout=120s",
        ]
    )


def container_restarts(node: KubeNode, container: str) -> tuple[str, int]:
    (pod,) = (p for p in pods(node) if p["metadata"]["name"].startswith(names.OPERATOR_DEPLOYMENT))
    (status,) = (s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    return pod["metadata"]["name"], int(status["restartCount"])


def assert_one_microvm_and_lease_each(node: KubeNode, prefix: str, count: int) -> None:
    statuses = claim_statuses(node, prefix)
    assert len(statuses) == count
    leases = [s.get("leaseID") for s in statuses.values()]
    vms = [(s.get("microVM") or {}).get("uid") for s in statuses.values()]
    assert all(leases) and len(set(leases)) == count, statuses  # one Lease each (CL-061)
    assert all(vms) and len(set(vms)) == count, statuses  # one MicroVM each
    held = battery_leases(node)
    for status in statuses.values():
        assert held.get(status["leaseID"]) == status["microVM"]["uid"], (status, held)


@pytest.mark.req("CL-008", "CL-030", "CL-061", "DP-002")
def test_the_operator_killed_in_a_burst_binds_every_claim_once(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    ready_pool(node, "burst", BURST)
    pod, restarts = container_restarts(node, "operator")
    claims = [f"burst-{i:02}" for i in range(BURST)]
    before, after = claims[: BURST // 2], claims[BURST // 2 :]

    def create(names_: list[str]) -> None:
        apply(node, *(samples.sample_claim(c, "burst", HOLDER, DEMO_NAMESPACE) for c in names_))

    # The operator's process dies mid-burst, as a crash or an OOM kill ends it: half the
    # claims are made before, half right after, so only the restarted operator binds those.
    create(before)
    node.kill_container(install.NAMESPACE, pod, "operator")
    killed = time.monotonic()
    create(after)
    bound = asyncio.run(bound_at(node, set(claims)))
    wait_restarted(node, pod, "operator", restarts + 1)  # the kubelet restarted it, same Pod
    assert_one_microvm_and_lease_each(node, "burst-", BURST)
    resumed = min(bound[c] for c in after) - killed
    early = sum(1 for c in before if bound[c] <= killed)
    print(
        f"\noperator killed during a burst of {BURST} ({early} bound before the kill): binding "
        f"resumed {resumed:.1f} s after it, all bound {max(bound.values()) - killed:.1f} s after it"
    )


@pytest.mark.req("BA-060", "DP-003", "CL-030")
def test_battery_killed_keeps_its_leases_on_its_volume(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    ready_pool(node, "burst", BURST)
    bound = {c: s["leaseID"] for c, s in claim_statuses(node, "burst-").items()}
    assert len(bound) == BURST, "runs after the burst drill"
    before = battery_leases(node)
    assert set(bound.values()) <= set(before)
    pod, restarts = container_restarts(node, "battery")
    node.kill_container(install.NAMESPACE, pod, "battery")
    started = time.monotonic()
    # A claim made after the kill binds once battery is back: it read its database again.
    apply(node, samples.sample_claim("after-battery", "burst", HOLDER, DEMO_NAMESPACE))
    asyncio.run(bound_at(node, {"after-battery"}))
    print(f"\nbattery killed: a new claim bound {time.monotonic() - started:.1f} s later")
    wait_restarted(node, pod, "battery", restarts + 1)
    after = battery_leases(node)
    assert {lease: before[lease] for lease in bound.values()} == {
        lease: after.get(lease) for lease in bound.values()
    }
    assert {c: s["leaseID"] for c, s in claim_statuses(node, "burst-").items()} == bound


@pytest.mark.req("TD-114")
def test_one_claim_at_a_time_through_the_installed_operator(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    ready_pool(node, "serial", 2)
    seconds = []
    for i in range(ROUNDS):
        name = f"serial-{i}"
        started = time.monotonic()
        apply(node, samples.sample_claim(name, "serial", HOLDER, DEMO_NAMESPACE))
        bound = asyncio.run(bound_at(node, {name}, timeout=120))
        seconds.append(bound[name] - started)
        node.kubectl(["delete", "microvmclaim", name, "-n", DEMO_NAMESPACE, "--wait=false"])
    print(
        f"\none claim at a time through the installed operator, create to Bound over {ROUNDS}: "
        f"p50 {statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms "
        "(kubectl apply's own start included)"
    )
    assert len(seconds) == ROUNDS


@pytest.mark.req("EA-040", "EA-041")
def test_a_drain_of_the_host_waits_until_its_claims_are_released(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    # Bound claims from the tests above are on the Host; the agent's guard Pod runs.
    assert any(s.get("phase") == "Bound" for s in claim_statuses(node, "").values())
    selector = f"{names.DRAIN_GUARD_LABEL}={NODE_NAME}"
    node.kubectl(
        [
            "wait",
            "-n",
            install.NAMESPACE,
            "pod",
            "-l",
            selector,
            "--for=condition=Ready",
            "--timeout=120s",
        ]
    )
    # One node: a full drain would also evict the operator, which must stay to release the
    # claims; the drain is of the guard (the Pod that stands for the claims), as the
    # requirement pages describe the hold.
    drain = subprocess.Popen(
        [
            kubectl_binary(),
            f"--kubeconfig={node.cp.admin_kubeconfig}",
            "drain",
            NODE_NAME,
            f"--pod-selector={selector}",
            "--timeout=300s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert drain.stdout is not None
        held = ""
        for line in drain.stdout:
            if "disruption budget" in line:
                held = line.strip()
                break
        assert held, "the drain finished without being held"
        assert drain.poll() is None, "the drain ended while claims were Bound"
        started = time.monotonic()
        node.kubectl(["delete", "microvmclaims", "--all", "-n", DEMO_NAMESPACE, "--wait=false"])
        rest, _ = drain.communicate(timeout=300)
        assert drain.returncode == 0, rest
        print(
            f"\ndrain held ({held!r}); it finished {time.monotonic() - started:.1f} s after "
            "the claims were released"
        )
        assert "evicted" in rest or "drained" in rest, rest
    finally:
        if drain.poll() is None:
            drain.kill()
        node.kubectl(["uncordon", NODE_NAME])


@pytest.mark.req("TD-113")
def test_nothing_the_node_ran_sent_a_packet_off_the_machine(
    node: KubeNode, installed: install.Installed
) -> None:
    # Pods reached the API server through the `kubernetes` Service (the operator and the
    # agents are ready), images came from the node's own registry, CoreDNS has no forwarder:
    # the drop rule on the way out saw nothing.
    assert node.machine.dropped() == 0
