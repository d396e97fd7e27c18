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
- the controller manager's HorizontalPodAutoscaler scales a Pool through its `scale`
  subresource from an external metric the test sets (`external_metrics`, served through the
  API server's aggregation layer), up and down, and battery's count follows the size up;
- nothing the node ran sent a packet off the machine, and the machine is as it was after.

The figures (cold build, `kubectl apply` to every workload ready, one claim at a time through
the installed operator, the autoscaler's metric change to new size) are printed for the
closing note and the docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import pytest
import yaml
from cluster.drills import (
    DEMO_NAMESPACE,
    HOLDER,
    IMAGES,
    INSTALL_YAML,
    apply,
    assert_one_microvm_and_lease_each,
    battery_env,
    battery_leases,
    bound_at,
    claim_statuses,
    container_restarts,
    install_release,
    make_demo,
    pods,
    pool_reached,
    publish_host_and_place_pool,
    ready_pool,
    start_drain,
    until_claims,
    wait_restarted,
)
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from batteryop.api import names, samples
from batteryop.client.wheel_test import make_venv, pip_install, pyenv_python, the_wheel
from batteryop.manifests import database, render
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.external_metrics import ExternalMetrics
from batteryop.testing.kubenode.node import NODE_NAME, KubeNode, kubectl_binary

POOL = "demo"
ROUNDS = 20


@pytest.fixture(scope="module")
def installed(node: KubeNode) -> install.Installed:
    return install_release(node)


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


@pytest.mark.req("TD-116", "CT-021", "CT-023", "CT-106")
def test_cert_manager_issued_every_certificate_and_the_chain_holds(
    node: KubeNode, installed: install.Installed
) -> None:
    pki = installed.pki
    serving = x509.load_pem_x509_certificate(pki.serving_ca)
    client = x509.load_pem_x509_certificate(pki.client_ca)
    exec_serving = x509.load_pem_x509_certificate(pki.exec_serving_ca)
    battery = x509.load_pem_x509_certificate(pki.battery_client)
    for ca in (serving, client, exec_serving):
        assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        ca.verify_directly_issued_by(ca)  # the selfSigned Issuer
    assert len({serving.subject, client.subject, exec_serving.subject}) == 3
    battery.verify_directly_issued_by(client)  # the CA Issuer on the client CA's Secret
    assert pki.battery_client_ca == pki.client_ca
    san = battery.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    want = names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [want]
    usage = battery.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    # flintlockd's serving certificate, which the Exec Agent Pod got by CSR, is signed by the
    # CSR approver with the serving CA cert-manager issued (battery trusts flintlockd by it).
    cert_dir = node.state / "root" / names.FLINTLOCKD_CERT_DIR.lstrip("/")
    flintlockd = x509.load_pem_x509_certificate((cert_dir / names.TLS_CERT_FILE).read_bytes())
    flintlockd.verify_directly_issued_by(serving)
    # cert-manager's own approver approved every request, and its issuers signed them.
    requests = json.loads(
        node.kubectl(["get", "certificaterequests", "-n", install.NAMESPACE, "-o", "json"])
    )["items"]
    assert len(requests) == len(install.CERTIFICATES)
    for request in requests:
        conditions = {c["type"]: c["status"] for c in request["status"]["conditions"]}
        assert conditions.get("Approved") == "True" and conditions.get("Ready") == "True"
    print(
        f"\ncert-manager issued install.yaml's {len(requests)} Certificates "
        f"{installed.times['apply_to_certificates']:.1f} s after `kubectl apply`"
    )


@pytest.fixture(scope="module")
def demo(node: KubeNode, installed: install.Installed) -> str:
    return make_demo(node)


@pytest.mark.req("TD-115", "IN-001", "EA-064", "CC-114", "CT-107")
def test_the_node_is_a_host_and_battery_run_reaches_its_agent_pod(
    node: KubeNode, installed: install.Installed, demo: str, tmp_path: Path
) -> None:
    publish_host_and_place_pool(node, POOL)
    python = pyenv_python("3.11")
    assert python is not None, "pyenv's CPython 3.11 (Pants runs on pyenv) is missing"
    bin_dir = make_venv(python, tmp_path / "venv")
    installed_wheel = pip_install(bin_dir, the_wheel())
    assert installed_wheel.returncode == 0, installed_wheel.stderr[-2000:]
    # CC-114: no CA given; the client reads the one the release publishes.
    env = battery_env(node, installed.pki, tmp_path, ca=False)
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
# Nobody renews the drills' claims, so their Leases live the Pool's expiry threshold from their
# bind (30 s by default). The battery drill reads battery's Leases before its kill and after its
# restart, both some time after the burst bound; a loaded machine once took longer than 30 s and
# the sweep expired the earliest three in between, as it should. The drills' Pool keeps its
# Leases longer than both drills together take.
BURST_LEASE = {"expiryThreshold": "10m"}
RESTORE_BURST = 8
RESTORE_BURST_MAX = 40
RESTORE_POOL = 2 * RESTORE_BURST + RESTORE_BURST_MAX + 2


@pytest.mark.req("CL-008", "CL-030", "CL-061", "DP-002")
def test_the_operator_killed_in_a_burst_binds_every_claim_once(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    ready_pool(node, "burst", BURST, lease=BURST_LEASE)
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
    ready_pool(node, "burst", BURST, lease=BURST_LEASE)
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


SCALED = "scaled"
SELF_SIZED = "self-sized"
METRIC = "claims_waiting"
"""The external metric the autoscaler reads: what a queue of work for the Pool would report."""
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
"""The controller manager's HPA controller, with its own ServiceAccount's credentials."""


def pool_autoscaler(pool: str, metric: str, maximum: int) -> dict:
    """A HorizontalPodAutoscaler of the Pool `pool` (RS-106: it sets `spec.size` through the
    `scale` subresource): one MicroVM per unit of the external `metric`, at once both ways."""
    at_once = {"stabilizationWindowSeconds": 0, "policies": [_steps(maximum)]}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": pool, "namespace": DEMO_NAMESPACE},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": names.API_VERSION,
                "kind": names.POOL_KIND,
                "name": pool,
            },
            "minReplicas": 1,
            "maxReplicas": maximum,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": {"scaleUp": at_once, "scaleDown": at_once},
        },
    }


def _steps(maximum: int) -> dict:
    return {"type": "Pods", "value": maximum, "periodSeconds": 1}


@contextlib.contextmanager
def autoscaling(node: KubeNode, pool: str, metric: str, maximum: int) -> Iterator[None]:
    """`pool_autoscaler` until the block ends, deleted then (before the metrics API goes)."""
    apply(node, pool_autoscaler(pool, metric, maximum))
    try:
        yield
    finally:
        node.kubectl(["delete", "hpa", pool, "-n", DEMO_NAMESPACE], check=False)


def hpa_conditions(node: KubeNode, name: str) -> dict[str, str]:
    hpa = json.loads(node.kubectl(["get", "hpa", name, "-n", DEMO_NAMESPACE, "-o", "json"]))
    return {c["type"]: c["status"] for c in (hpa.get("status") or {}).get("conditions", [])}


@pytest.mark.req("RS-106", "RS-107")
def test_a_horizontal_pod_autoscaler_scales_a_pool_from_an_external_metric(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    ready_pool(node, SCALED, 1)
    metrics = ExternalMetrics(node.front_proxy_ca)
    metrics.set(DEMO_NAMESPACE, METRIC, 1)  # at the target: the Pool stays at 1
    with metrics.serving(node), autoscaling(node, SCALED, METRIC, maximum=6):
        for condition in ("AbleToScale", "ScalingActive"):  # the metric was read
            node.kubectl(
                [
                    "wait",
                    "-n",
                    DEMO_NAMESPACE,
                    f"hpa/{SCALED}",
                    f"--for=condition={condition}",
                    "--timeout=120s",
                ]
            )

        def size(want: int) -> Callable[[dict], bool]:
            return lambda pool: pool["spec"]["size"] == want

        def replicas(want: int) -> Callable[[dict], bool]:
            return lambda pool: (pool.get("status") or {}).get("replicas") == want

        up = time.monotonic()
        metrics.set(DEMO_NAMESPACE, METRIC, 4)
        grown = asyncio.run(pool_reached(node, SCALED, {"size": size(4), "replicas": replicas(4)}))
        down = time.monotonic()
        metrics.set(DEMO_NAMESPACE, METRIC, 2)
        shrunk = asyncio.run(pool_reached(node, SCALED, {"size": size(2)}))
        conditions = hpa_conditions(node, SCALED)
        assert conditions["AbleToScale"] == conditions["ScalingActive"] == "True", conditions
        # The HPA controller read the metric as itself, through the aggregator.
        read = {seen.user for seen in metrics.requests() if METRIC in seen.path}
        assert read == {HPA_USER}, metrics.requests()

        # RS-107: a Pool its own policy sizes has no spec.size, so its scale subresource has no
        # replicas to read: an HPA aimed at it cannot get its scale and leaves it alone, and the
        # two never fight over the size.
        policy = samples.demo_pool(SELF_SIZED, namespace=DEMO_NAMESPACE)
        del policy["spec"]["size"]
        policy["spec"]["autoscaling"] = {"minIdle": 1, "maxSize": 3}
        apply(node, policy)
        try:
            node.kubectl(
                [
                    "wait",
                    "-n",
                    DEMO_NAMESPACE,
                    f"pool/{SELF_SIZED}",
                    "--for=jsonpath={.status.size}=1",  # the policy's size: minIdle
                    "--timeout=120s",
                ]
            )
            with autoscaling(node, SELF_SIZED, METRIC, maximum=6):
                node.kubectl(
                    [
                        "wait",
                        "-n",
                        DEMO_NAMESPACE,
                        f"hpa/{SELF_SIZED}",
                        "--for=condition=AbleToScale=False",
                        "--timeout=120s",
                    ]
                )
                hpa = json.loads(
                    node.kubectl(["get", "hpa", SELF_SIZED, "-n", DEMO_NAMESPACE, "-o", "json"])
                )
                (able,) = (c for c in hpa["status"]["conditions"] if c["type"] == "AbleToScale")
                assert able["reason"] == "FailedGetScale", able
                assert '".spec.size" does not exist' in able["message"], able
                body = json.loads(
                    node.kubectl(["get", "pool", SELF_SIZED, "-n", DEMO_NAMESPACE, "-o", "json"])
                )
                assert "size" not in body["spec"], body["spec"]
                assert body["status"]["size"] == 1, body["status"]  # the HPA changed nothing
        finally:
            node.kubectl(["delete", "pool", SELF_SIZED, "-n", DEMO_NAMESPACE, "--wait=false"])
    pool = json.loads(node.kubectl(["get", "pool", SCALED, "-n", DEMO_NAMESPACE, "-o", "json"]))
    print(
        f"\nHPA drill: metric change to new spec.size {grown['size'] - up:.1f} s (up, 1 to 4), "
        f"{shrunk['size'] - down:.1f} s (down, 4 to 2); to status.replicas "
        f"{grown['replicas'] - up:.1f} s (up; after the shrink it is "
        f"{pool['status'].get('replicas')}: battery deletes no MicroVM when a Pool shrinks); "
        f"the metrics APIService Available {metrics.available_in:.1f} s after it was applied"
    )
    node.kubectl(["delete", "pool", SCALED, "-n", DEMO_NAMESPACE, "--wait=false"])


@pytest.mark.req("EA-040", "EA-041")
def test_a_drain_of_the_host_waits_until_its_claims_are_released(
    node: KubeNode, installed: install.Installed, demo: str
) -> None:
    # Bound claims from the tests above are on the Host; the agent's guard Pod runs.
    assert any(s.get("phase") == "Bound" for s in claim_statuses(node, "").values())
    selector = f"{names.DRAIN_GUARD_LABEL}={NODE_NAME}"
    # One node: a full drain would also evict the operator, which must stay to release the
    # claims; the drain is of the guard (the Pod that stands for the claims), as the
    # requirement pages describe the hold.
    drain, held = start_drain(node, NODE_NAME, f"--pod-selector={selector}")
    try:
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


def kubectl_stream(
    node: KubeNode,
    args: list[str],
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> str:
    """kubectl with binary standard streams, as a user pipes a file through it; its stderr."""
    proc = subprocess.run(
        [kubectl_binary(), f"--kubeconfig={node.cp.admin_kubeconfig}", *args],
        stdin=stdin,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return proc.stderr.decode()


def destroy_battery_volume(node: KubeNode) -> None:
    """battery's volume lost: the operator's Pod stopped, the claim, the volume and every byte
    on it gone; then a new, empty volume and claim, as after replacing a failed disk."""
    ns = install.NAMESPACE
    node.kubectl(["-n", ns, "scale", f"deploy/{names.OPERATOR_DEPLOYMENT}", "--replicas=0"])
    selector = f"{names.COMPONENT_LABEL}={render.COMPONENT_OPERATOR}"
    node.kubectl(["-n", ns, "wait", "--for=delete", "pod", "-l", selector, "--timeout=180s"])
    node.kubectl(["-n", ns, "delete", "pvc", names.BATTERY_DATA_PVC, "--wait=true"])
    node.kubectl(["delete", "pv", install.BATTERY_VOLUME, "--wait=true"])
    shutil.rmtree(node.state / "volumes" / install.BATTERY_VOLUME)
    install.battery_volume(node)
    apply(node, render.pvc_object(ns))


def copy_leases(copy: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT lease_id FROM leases")}


@pytest.mark.req("DP-116", "DP-117", "DP-118", "DP-119", "CL-012", "CL-030", "TD-123")
def test_battery_backed_up_in_a_burst_and_restored_onto_a_new_volume(
    node: KubeNode, installed: install.Installed, demo: str, tmp_path: Path
) -> None:
    ready_pool(node, "backup", RESTORE_POOL, lease=BURST_LEASE)

    def claim(names_: list[str]) -> bool:
        apply(node, *(samples.sample_claim(c, "backup", HOLDER, DEMO_NAMESPACE) for c in names_))
        return True

    before = [f"restore-a{i:02}" for i in range(RESTORE_BURST)]
    after = [f"restore-c{i:02}" for i in range(RESTORE_BURST)]
    claim(before)
    asyncio.run(bound_at(node, set(before)))
    # The backup runs while a burst is made and binds (DP-116): whatever the copy holds is one
    # moment's. The burst's claims are made one by one, in a thread, from just before the
    # backup starts until it has finished.
    copy = tmp_path / "poolmgr.db"
    backing_up = threading.Event()

    def burst() -> list[str]:
        made: list[str] = []
        while (backing_up.is_set() or not made) and len(made) < RESTORE_BURST_MAX:
            made.append(f"restore-b{len(made):02}")
            claim(made[-1:])
        return made

    backing_up.set()
    with ThreadPoolExecutor(1) as pool:
        making = pool.submit(burst)
        started = time.monotonic()
        try:
            with copy.open("wb") as out:
                said = kubectl_stream(node, database.backup_args(install.NAMESPACE), stdout=out)
        finally:
            backing_up.clear()
        backed_up = time.monotonic() - started
        during = making.result()
    asyncio.run(bound_at(node, set(during)))
    claim(after)  # bound after the copy: battery's restored database cannot know them
    asyncio.run(bound_at(node, set(after)))
    claims = before + during + after
    leases = {c: s["leaseID"] for c, s in claim_statuses(node, "restore-").items()}
    vms = {(s.get("microVM") or {}).get("uid") for s in claim_statuses(node, "").values()}
    in_copy = copy_leases(copy)
    kept = {c for c in claims if leases[c] in in_copy}
    assert set(before) <= kept and not kept & set(after), (sorted(kept), said)

    destroy_battery_volume(node)
    image = node.kubectl(database.image_args(install.NAMESPACE))
    started = time.monotonic()
    with copy.open("rb") as source:
        restored = kubectl_stream(
            node, database.restore_args(install.NAMESPACE, image), stdin=source
        )
    took = time.monotonic() - started
    (restored,) = (
        line for line in restored.splitlines() if line.startswith("battery-operator db:")
    )
    node.kubectl(
        ["-n", install.NAMESPACE, "scale", f"deploy/{names.OPERATOR_DEPLOYMENT}", "--replicas=1"]
    )
    started = time.monotonic()

    # Every claim Bound on the Lease the copy holds, or reported lost: nothing silently kept.
    def settled(found: dict[str, dict]) -> bool:
        phases = {c: ((found.get(c) or {}).get("status") or {}).get("phase") for c in claims}
        return all(phases[c] == ("Bound" if c in kept else "Expired") for c in claims)

    asyncio.run(until_claims(node, settled, 300, "claims Bound on the copy's Leases or Expired"))
    reconciled = time.monotonic() - started
    statuses = claim_statuses(node, "restore-")
    assert {c: statuses[c]["leaseID"] for c in kept} == {c: leases[c] for c in kept}
    held = battery_leases(node)
    assert all(leases[c] in held for c in kept)
    lost = set(claims) - kept
    events = json.loads(
        node.kubectl(
            [
                "get",
                "events",
                "-n",
                DEMO_NAMESPACE,
                "--field-selector=reason=LeaseExpired",
                "-o",
                "json",
            ]
        )
    )["items"]
    assert lost <= {e["involvedObject"]["name"] for e in events}  # CL-012: each one named
    # DP-117: the copy's free MicroVMs were retired: a claim now gets a MicroVM no claim had.
    claim(["restore-fresh"])
    asyncio.run(bound_at(node, {"restore-fresh"}))
    fresh = claim_statuses(node, "restore-fresh")["restore-fresh"]["microVM"]["uid"]
    assert fresh not in vms
    print(
        f"\nbattery's database backed up during a burst in {backed_up:.2f} s ({said.strip()}); "
        f"{len(kept & set(during))} of the burst's {len(during)} claims in the copy; volume "
        f"destroyed; restored in {took:.2f} s ({restored}); {len(kept)} claims kept Bound, "
        f"{len(lost)} reported Expired (LeaseExpired), all settled {reconciled:.1f} s after the "
        "operator's Deployment was scaled back to 1"
    )


@pytest.mark.req("TD-113")
def test_nothing_the_node_ran_sent_a_packet_off_the_machine(
    node: KubeNode, installed: install.Installed
) -> None:
    # Pods reached the API server through the `kubernetes` Service (the operator and the
    # agents are ready), images came from the node's own registry, CoreDNS has no forwarder:
    # the drop rule on the way out saw nothing.
    assert node.machine.dropped() == 0
