"""What the real-node tests share (issues 23 and 27): claims on the installed system, watched
through the API, and battery's own record of its Leases."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Self

import yaml

from batteryop.api import names, samples
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CLAIMS, CONFIGMAPS, POOLS
from batteryop.manifests import render
from batteryop.testing.host_registry_env import published, until_listed
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.node import KubeNode, kubectl_binary

DEMO_NAMESPACE = "demo"
HOLDER = "sandbox"
IMAGES = ("battery-operator", "exec-agent", "csr-approver", "host-registry", install.FAKE_BATTERY)
"""The release's images in the test's sandbox (runtime package dependencies), by layout name."""
IMAGE_DIR = Path("images")
INSTALL_YAML = Path("release/install.yaml")
MANIFESTS = Path("release/manifests")
"""The Manifests artifact as the release writes it (an OCI layout)."""


def pods(node: KubeNode, namespace: str = install.NAMESPACE) -> list[dict]:
    return list(json.loads(node.kubectl(["get", "pods", "-n", namespace, "-o", "json"]))["items"])


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


def install_release(
    node: KubeNode,
    storage: install.Storage = "local",
    *,
    flux: install.FluxSource | None = None,
    chart: install.HelmChart | None = None,
) -> install.Installed:
    """The release installed by `install.install` (`kubectl apply -k`, or through Flux or
    Helm as `flux` or `chart` say), its images mirrored, battery's volume as `storage` says;
    its figures printed."""
    layouts = {name: IMAGE_DIR / name for name in IMAGES}
    missing = [n for n, p in layouts.items() if not (p / "index.json").is_file()]
    assert not missing, f"the release images were not built: {missing}"
    done = install.install(node, INSTALL_YAML, layouts, flux=flux, chart=chart, storage=storage)
    times = done.times
    how = "the Kustomization" if flux else "`helm install`" if chart else "`kubectl apply -k`"
    controllers = f"Flux's controllers running in {times['flux']:.1f} s; " if flux else ""
    print(
        f"\ninstall.yaml on {len(node.members)} Node(s): images mirrored in "
        f"{times['mirror']:.1f} s; cert-manager running in {times['cert_manager']:.1f} s; "
        f"{controllers}{how} to every Certificate issued "
        f"{times['apply_to_certificates']:.1f} s, to every workload ready: "
        f"{times['apply_to_ready']:.1f} s"
    )
    print(done.applied)
    print(node.kubectl(["get", "pods", "-n", install.NAMESPACE, "-o", "wide"]))
    return done


def battery_env(node: KubeNode, pki: install.Pki, tmp: Path, *, ca: bool = True) -> dict[str, str]:
    """The `battery` command's environment; without `ca`, a kubeconfig is all it has (CC-114)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "KUBECONFIG": str(node.cp.admin_kubeconfig),
        "BATTERY_NAMESPACE": DEMO_NAMESPACE,
        "BATTERY_HOLDER": HOLDER,
    }
    if ca:
        path = tmp / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY  # CT-101: the agents' own serving CA
        path.write_bytes(pki.exec_serving_ca)
        env["BATTERY_CA"] = str(path)
    return env


def publish_host_and_place_pool(node: KubeNode, pool: str) -> None:
    """Until the host registry Pod has published every Node as battery's Hosts, then the
    demo Pool `pool`, Ready on them."""
    # The host registry Pod publishes each Node, at its address, as one of battery's Hosts,
    # once its agent has reported it ready for the settle time install.yaml gives (IN-001,
    # IN-011).
    want = {m.name: f"{m.address}:{names.FLINTLOCKD_PORT}" for m in node.members}
    started = time.monotonic()
    try:
        asyncio.run(wait_published(node, want))
    except AssertionError as err:
        node_yaml = node.kubectl(["get", "nodes", "-o", "yaml"], check=False)
        raise AssertionError(f"{err}\n{install.diagnose(node, 40)}\n{node_yaml}") from None
    print(f"\nthe host registry Pod published the Host after {time.monotonic() - started:.1f} s")
    config = json.loads(
        node.kubectl(
            ["get", "configmap", names.BATTERY_CONFIG_MAP, "-n", install.NAMESPACE, "-o", "json"]
        )
    )
    hosts = json.loads(config["data"][render.CONFIG_KEY])["hosts"]
    assert sorted((h["name"], h["address"]) for h in hosts) == sorted(want.items())
    node.kubectl(
        ["apply", "-f", "-"],
        stdin=yaml.safe_dump(samples.demo_pool(pool, namespace=DEMO_NAMESPACE)),
    )
    node.kubectl(
        ["wait", "-n", DEMO_NAMESPACE, f"pool/{pool}", "--for=condition=Ready", "--timeout=180s"]
    )


def make_demo(node: KubeNode) -> str:
    """The claims' namespace and their Holder."""
    node.kubectl(["create", "namespace", DEMO_NAMESPACE])
    node.kubectl(["create", "serviceaccount", HOLDER, "-n", DEMO_NAMESPACE])
    return DEMO_NAMESPACE


def kube(node: KubeNode) -> KubeClient:
    return KubeClient(KubeConfig.from_dict(node.cp.kubeconfig()), user_agent="tests")


async def until_claims(
    node: KubeNode, check: Callable[[dict[str, dict]], bool], timeout: float, what: str
) -> None:
    """Until `check` holds of the demo namespace's claims (name -> body), watched."""
    async with kube(node) as client:
        await until_listed(client, CLAIMS, DEMO_NAMESPACE, check, timeout=timeout, what=what)


async def bound_at(node: KubeNode, claims: set[str], timeout: float = 300.0) -> dict[str, float]:
    """When (monotonic) each of `claims` was first seen Bound, watched until all are."""
    seen: dict[str, float] = {}

    def check(found: dict[str, dict]) -> bool:
        for name, body in found.items():
            if name in claims and (body.get("status") or {}).get("phase") == "Bound":
                seen.setdefault(name, time.monotonic())
        return claims <= set(seen)

    await until_claims(node, check, timeout, f"claims {sorted(claims)} Bound")
    return seen


async def renewed(node: KubeNode, times: dict[str, str], timeout: float = 120.0) -> None:
    """Until each claim's `status.observedRenewTime` is at or after the renewTime set on it
    (the operator relayed it to battery, CL-010), watched. At or after, not equal: a Holder
    that renews again meanwhile makes the operator relay the newer time instead."""
    wanted = {claim: datetime.fromisoformat(when) for claim, when in times.items()}

    def check(found: dict[str, dict]) -> bool:
        def observed(claim: str) -> datetime | None:
            value = ((found.get(claim) or {}).get("status") or {}).get("observedRenewTime")
            return datetime.fromisoformat(value) if value else None

        return all((o := observed(c)) is not None and o >= w for c, w in wanted.items())

    await until_claims(node, check, timeout, f"claims {sorted(times)} renewed")


async def pool_reached(
    node: KubeNode, pool: str, marks: dict[str, Callable[[dict], bool]], timeout: float = 120.0
) -> dict[str, float]:
    """When (monotonic) each of `marks` first held of the demo Pool `pool`'s body, watched
    until every one has."""
    seen: dict[str, float] = {}

    def check(found: dict[str, dict]) -> bool:
        body = found.get(pool)
        for mark, holds in marks.items():
            if body is not None and mark not in seen and holds(body):
                seen[mark] = time.monotonic()
        return set(marks) <= set(seen)

    async with kube(node) as client:
        await until_listed(
            client,
            POOLS,
            DEMO_NAMESPACE,
            check,
            timeout=timeout,
            field_selector=f"metadata.name={pool}",
            what=f"Pool {pool}: {sorted(marks)}",
        )
    return seen


def apply(node: KubeNode, *objects: dict) -> None:
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(objects))


def ready_pool(node: KubeNode, name: str, size: int, lease: dict | None = None) -> None:
    pool = samples.demo_pool(name, namespace=DEMO_NAMESPACE)
    pool["spec"]["size"] = size
    if lease is not None:
        pool["spec"]["lease"] = lease
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
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return dict(conn.execute("SELECT lease_id, vm_uid FROM leases").fetchall())


def start_drain(node: KubeNode, node_name: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """`kubectl drain` of `node_name` (its agent's drain guard Ready first), read until the
    guard's disruption budget holds it; the running drain and the line that said so."""
    node.kubectl(
        [
            "wait",
            "-n",
            install.NAMESPACE,
            "pod",
            "-l",
            f"{names.DRAIN_GUARD_LABEL}={node_name}",
            "--for=condition=Ready",
            "--timeout=120s",
        ]
    )
    drain = subprocess.Popen(
        [
            kubectl_binary(),
            f"--kubeconfig={node.cp.admin_kubeconfig}",
            "drain",
            node_name,
            *flags,
            "--timeout=300s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert drain.stdout is not None
    said = []
    for line in drain.stdout:
        said.append(line)
        if "disruption budget" in line:
            assert drain.poll() is None, "the drain ended while claims were Bound"
            return drain, line.strip()
    drain.wait()
    raise AssertionError("the drain finished without being held:\n" + "".join(said))


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


class Background:
    """`run` in a thread for the length of a `with` block; `stop` is set at its end, and the
    thread given `JOIN_SECONDS` to finish what it was doing."""

    stop: threading.Event
    JOIN_SECONDS: ClassVar[float] = 60.0

    def run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=self.JOIN_SECONDS)


@dataclass
class Prober(Background):
    """Claims made one at a time on `pool` while something happens: when each was made and
    when it was Bound, to find the window in which no claim could bind."""

    node: KubeNode
    pool: str
    made: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)
    JOIN_SECONDS: ClassVar[float] = 320.0  # a probe claim waits up to 300 s to bind

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                name = f"probe-{i:03}"
                i += 1
                started = time.monotonic()
                apply(self.node, samples.sample_claim(name, self.pool, HOLDER, DEMO_NAMESPACE))
                bound = asyncio.run(bound_at(self.node, {name}, timeout=300))
                with self.changed:
                    self.made.append((started, bound[name]))
                    self.changed.notify_all()
                self.node.kubectl(
                    ["delete", "microvmclaim", name, "-n", DEMO_NAMESPACE, "--wait=false"]
                )
        except BaseException as err:  # reported by the test
            with self.changed:
                self.error = err
                self.changed.notify_all()

    def bound_after(self, moment: float, timeout: float = 300.0) -> None:
        """Until a probe claim is Bound after `moment` (or the prober failed)."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.error is not None or any(b > moment for _, b in self.made),
                timeout=timeout,
            )
