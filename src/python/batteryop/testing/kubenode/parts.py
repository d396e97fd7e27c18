"""The node's parts, each written out and started as a process of the node (`node.KubeNode`).

One function per part: the registry, containerd (with its CNI and registry mirror config),
the kubelet (its serving certificate and KubeletConfiguration), the kube-scheduler and the
kube-controller-manager (beside the control plane, outside the node's namespaces), kube-proxy,
CoreDNS; and the identities they run as (RBAC the bootstrap roles lack, one kubeconfig each).
The settings this machine needs are explained in `node.py`'s docstring.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from batteryop.testing.kubenode import binaries
from batteryop.testing.kubenode.machine import CGROUP_ROOT, NODE_ADDRESS
from batteryop.testing.kubenode.names import (
    CLUSTER_DOMAIN,
    COREDNS_USER,
    DNS_ADDRESS,
    MIRRORED_REGISTRIES,
    NODE_NAME,
    PAUSE_IMAGE,
    POD_CIDR,
    REGISTRY,
    SERVICE_CIDR,
)
from batteryop.tls import CertificateAuthority

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode


def grant_rbac(node: KubeNode) -> None:
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
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(objects))


def kubeconfigs(node: KubeNode, ca: CertificateAuthority) -> dict[str, Path]:
    identities = {
        "kubelet": (f"system:node:{NODE_NAME}", ["system:nodes"]),
        "kube-proxy": ("system:kube-proxy", []),
        "kube-scheduler": ("system:kube-scheduler", []),
        "kube-controller-manager": ("system:kube-controller-manager", []),
        "coredns": (COREDNS_USER, []),
    }
    folder = node.state / "kubeconfigs"
    folder.mkdir()
    return {
        name: node.cp.write_kubeconfig(
            folder / f"{name}.kubeconfig",
            client=ca.issue(user, organizations=groups, client=True),
        )
        for name, (user, groups) in identities.items()
    }


def start_registry(node: KubeNode) -> None:
    folder = node.state / "registry"
    folder.mkdir()
    config = registry_config(folder, f":{REGISTRY.rsplit(':', 1)[1]}")  # every address
    proc = node.spawn("registry", ["docker-registry", "serve", str(config)])
    # Ready when its own log says it listens.
    node.wait_for("the registry listens", lambda: "listening on" in proc.tail(), procs=["registry"])


def start_containerd(node: KubeNode) -> None:
    folder = node.state / "containerd"
    certs = folder / "certs.d"
    for registry in (*MIRRORED_REGISTRIES, REGISTRY):
        (certs / registry).mkdir(parents=True)
        (certs / registry / "hosts.toml").write_text(
            f'server = "http://{REGISTRY}"\n\n[host."http://{REGISTRY}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
    cni = folder / "net.d"
    cni.mkdir(parents=True)
    (cni / "10-batteryop.conflist").write_text(json.dumps(_cni_config(node.state), indent=2))
    config = folder / "config.toml"
    config.write_text(_containerd_config(folder, cni, certs))
    env = {**os.environ, "PATH": f"{node.bins.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    node.spawn("containerd", [str(node.bins.containerd), "--config", str(config)], env=env)
    node.wait_for(
        "containerd's socket",
        lambda: (folder / "containerd.sock").is_socket(),
        procs=["containerd"],
    )
    node.containerd_socket = folder / "containerd.sock"


def start_kubelet(node: KubeNode, kubeconfig: Path, ca: CertificateAuthority) -> None:
    folder = node.state / "kubelet"
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
            "x509": {"clientCAFile": str(node.state / "pki" / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
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
    node.spawn(
        "kubelet",
        [
            str(node.bins.kubelet),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={folder / 'root'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_ADDRESS}",
            "--v=1",
        ],
    )


def start_control_plane_parts(node: KubeNode, kube: dict[str, Path]) -> None:
    pki = node.cp.workdir / "pki"
    node.spawn(
        "kube-scheduler",
        [
            str(node.bins.kube_scheduler),
            f"--kubeconfig={kube['kube-scheduler']}",
            "--secure-port=0",
            "--leader-elect=false",
        ],
        in_node=False,
    )
    node.spawn(
        "kube-controller-manager",
        [
            str(node.bins.kube_controller_manager),
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


def start_kube_proxy(node: KubeNode, kubeconfig: Path) -> None:
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
    path = node.state / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    node.spawn("kube-proxy", [str(node.bins.kube_proxy), f"--config={path}"])


def start_coredns(node: KubeNode, kubeconfig: Path) -> None:
    corefile = node.state / "Corefile"
    corefile.write_text(
        f".:53 {{\n  bind {DNS_ADDRESS}\n  errors\n  ready 127.0.0.1:8181\n"
        f"  kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"    kubeconfig {kubeconfig}\n    pods insecure\n"
        "    fallthrough in-addr.arpa ip6.arpa\n  }\n  cache 30\n}\n"
    )
    node.spawn("coredns", [str(node.bins.coredns), "-conf", str(corefile)])


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
