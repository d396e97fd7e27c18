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
from batteryop.kube.resources import CONFIGMAPS
from batteryop.manifests import render
from batteryop.testing.host_registry_env import published, until_listed
from batteryop.testing.kubenode import binaries, install
from batteryop.testing.kubenode.machine import NODE_ADDRESS
from batteryop.testing.kubenode.node import NODE_NAME, KubeNode

IMAGES = ("battery-operator", "exec-agent", "csr-approver", "host-registry", install.FAKE_BATTERY)
IMAGE_DIR = Path("images")
INSTALL_YAML = Path("release/install.yaml")
DEMO_NAMESPACE = "demo"
HOLDER = "sandbox"
POOL = "demo"


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


@pytest.mark.req("TD-115", "IN-001", "EA-064")
def test_the_node_is_a_host_and_battery_run_reaches_its_agent_pod(
    node: KubeNode, installed: install.Installed, tmp_path: Path
) -> None:
    node.kubectl(["create", "namespace", DEMO_NAMESPACE])
    node.kubectl(["create", "serviceaccount", HOLDER, "-n", DEMO_NAMESPACE])
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


@pytest.mark.req("TD-113")
def test_nothing_the_node_ran_sent_a_packet_off_the_machine(
    node: KubeNode, installed: install.Installed
) -> None:
    # Pods reached the API server through the `kubernetes` Service (the operator and the
    # agents are ready), images came from the node's own registry, CoreDNS has no forwarder:
    # the drop rule on the way out saw nothing.
    assert node.machine.dropped() == 0
