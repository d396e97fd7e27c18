"""What a Pod-based peer needs of a cluster, beside the test control plane: Nodes and a scheduler.

agent-sandbox's Sandboxes are Pods. No kubelet runs here: kwok (`3rdparty/go/kwok`, v0.8.0)
plays `NODES` fake Nodes and moves the Pods bound to them to Running and Ready. It runs with
its own "fast" stages, read from its checked module source (node-initialize, pod-ready,
pod-complete, pod-delete) and without the node heartbeat stage or node Leases, so idle fake
Nodes cause no API traffic, logging warnings only. Each fake Node has a pod CIDR of its own (kwok gives Pods
addresses from it), a large allocatable, and no taint. The pinned kube-scheduler
(`3rdparty/go/controlplane`, as the real node's) binds the Pods to them, as a cluster's would.
No kube-controller-manager runs: nothing collects garbage.

Each program runs as its own process (`Daemon`), its output in a log file, until the context
ends; the kernel kills it should this process die first (`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client as k8s

from batteryop.release.gomodules import download, find_pins
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.controlplane.gobuild import NODE, ToolSet, pinned_version
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.processes import file_tail, spawn_logged, terminate

KWOK: Final = ToolSet(
    "kwok",
    Path("3rdparty/go/kwok"),
    {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
)
KWOK_MODULE: Final = "sigs.k8s.io/kwok"
STAGES: Final = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
"""kwok's "fast" stages, less its node heartbeat (paths in its module source)."""
FAKE_NODE_ANNOTATION: Final = ("kwok.x-k8s.io/node", "fake")
"""The annotation kwok manages Nodes by (our own simulated Hosts' Nodes lack it)."""
FAKE_NODE_LABEL: Final = ("type", "kwok")
"""The label the peer's Pods select their Nodes by."""
NODES: Final = 2
ALLOCATABLE: Final = {"cpu": "1k", "memory": "1Ti", "pods": "1M"}


class DaemonError(RuntimeError):
    """A program of the benchmark's cluster exited or never became ready."""


@dataclass
class Daemon:
    """A program running as its own process, its output in `log`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check(self) -> None:
        """DaemonError with its log's tail if it has exited."""
        if self.popen.poll() is not None:
            raise DaemonError(
                f"{self.name} exited with {self.popen.returncode}:\n{file_tail(self.log, 40)}"
            )

    @classmethod
    @contextlib.contextmanager
    def run(
        cls, name: str, argv: Sequence[str], log_dir: Path, env: Mapping[str, str] | None = None
    ) -> Iterator[Daemon]:
        log = log_dir / f"{name}.log"
        popen = spawn_logged(argv, log, env)
        try:
            yield cls(name, popen, log)
        finally:
            terminate(popen)


def kwok_version() -> str:
    """The kwok version `3rdparty/go/kwok` pins."""
    return pinned_version(find_pins(KWOK.module), KWOK_MODULE)


def kwok_config(path: Path) -> Path:
    """kwok's stages (`STAGES`) from its module source, checked against go.sum, in one file."""
    (source,) = download(find_pins(KWOK.module), [KWOK_MODULE]).values()
    docs = [yaml.safe_load((source / stage).read_text()) for stage in STAGES]
    path.write_text(yaml.safe_dump_all(docs))
    return path


def fake_node(index: int) -> k8s.V1Node:
    key, value = FAKE_NODE_ANNOTATION
    label, kind = FAKE_NODE_LABEL
    return k8s.V1Node(
        metadata=k8s.V1ObjectMeta(
            name=f"kwok-node-{index}", annotations={key: value}, labels={label: kind}
        ),
        spec=k8s.V1NodeSpec(pod_cidr=f"10.{64 + index}.0.0/16"),
        status=k8s.V1NodeStatus(allocatable=ALLOCATABLE, capacity=ALLOCATABLE),
    )


@contextlib.contextmanager
def pod_nodes(cp: ControlPlane, work: Path) -> Iterator[list[Daemon]]:
    """`NODES` fake Nodes played by kwok, and kube-scheduler placing Pods on them; the two
    processes."""
    api = admin_client(cp)
    try:
        core = k8s.CoreV1Api(api)
        for i in range(NODES):
            node = fake_node(i)
            with contextlib.suppress(k8s.ApiException):
                core.create_node(node)
            # The API server taints a new Node not-ready (TaintNodesByCondition); the node
            # lifecycle controller of kube-controller-manager, not run here, would lift it once
            # kwok reports the Node Ready.
            core.patch_node(node.metadata.name, {"spec": {"taints": None}})
    finally:
        api.close()
    kwok = KWOK.ensure()["kwok"]
    scheduler = NODE.ensure()["kube-scheduler"]
    admin = cp.write_kubeconfig(work / "kwok.kubeconfig")
    as_scheduler = cp.write_kubeconfig(
        work / "scheduler.kubeconfig", client=cp.client_cert("system:kube-scheduler")
    )
    key, value = FAKE_NODE_ANNOTATION
    with contextlib.ExitStack() as stack:
        daemons = [
            stack.enter_context(
                Daemon.run(
                    "kwok",
                    [
                        str(kwok),
                        f"--kubeconfig={admin}",
                        f"--config={kwok_config(work / 'kwok-stages.yaml')}",
                        "--manage-all-nodes=false",
                        f"--manage-nodes-with-annotation-selector={key}={value}",
                        "--node-lease-duration-seconds=0",
                        # A line per Pod patched is the kubelet stand-in's cost, not the peer's.
                        "--v=WARN",
                        f"--server-address=127.0.0.1:{free_port()}",
                    ],
                    work,
                )
            ),
            stack.enter_context(
                Daemon.run(
                    "kube-scheduler",
                    [
                        str(scheduler),
                        f"--kubeconfig={as_scheduler}",
                        "--leader-elect=false",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={free_port()}",
                    ],
                    work,
                )
            ),
        ]
        yield daemons
