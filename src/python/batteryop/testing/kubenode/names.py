"""The real cluster's fixed names, addresses and image references (`node.KubeNode`).

Only one cluster runs on a machine at a time, so these are constants; a cluster of N Nodes
numbers them 0..N-1 and `node_name`, `node_address` and `pod_cidr` give each its own. The
first Node keeps the names a one-Node cluster had (`NODE_NAME`, `NODE_ADDRESS`, `POD_CIDR`):
it also runs the cluster's image registry and CoreDNS. `node.py` re-exports them.
"""

from __future__ import annotations

from typing import Final

from batteryop.testing.kubenode.machine import NODE_ADDRESS

MAX_NODES: Final = 8
"""Nodes numbered 0..7: addresses 10.89.0.2-9, Pod ranges 10.88.0-7.0/24."""
NODE_NAME: Final = "batteryop-node"
CLUSTER_POD_CIDR: Final = "10.88.0.0/16"
"""Every Node's Pod range lies in it (kube-proxy's clusterCIDR; traffic leaving it is
masqueraded to the Node's address)."""
POD_CIDR: Final = "10.88.0.0/24"
"""The first Node's Pod range."""
SERVICE_CIDR: Final = "10.96.0.0/16"
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"
CLUSTER_DOMAIN: Final = "cluster.local"
DNS_ADDRESS: Final = NODE_ADDRESS
"""CoreDNS listens on the first Node's address (a ClusterIP without a Service would be refused
by kube-proxy's nftables rules for unallocated ClusterIPs)."""
REGISTRY: Final = "127.0.0.1:5000"
"""The cluster's image registry, as the harness and the first Node's containerd reach it: that
Node's loopback. The other Nodes' containerd reach the same name at `REGISTRY_FOR_PODS`
(their certs.d says so)."""
REGISTRY_FOR_PODS: Final = f"{NODE_ADDRESS}:5000"
"""The same registry as a Pod or another Node reaches it (Flux's source-controller pulls
artifacts from it)."""
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"
"""The sandbox image containerd pins, and the Exec Agent's drain guard image in install.yaml:
registry.k8s.io is mirrored to the node's registry (containerd's hosts.toml)."""
MIRRORED_REGISTRIES: Final = ("registry.k8s.io",)
READY_TIMEOUT: Final = 120.0
COREDNS_USER: Final = "batteryop:coredns"
FRONT_PROXY_CLIENT: Final = "front-proxy-client"
"""The name on the aggregation layer's client certificate (kubeadm's), the one name its
`--requestheader-allowed-names` allows."""


def node_name(index: int) -> str:
    """`batteryop-node`, `batteryop-node-2`, ..."""
    return NODE_NAME if index == 0 else f"{NODE_NAME}-{index + 1}"


def pod_cidr(index: int) -> str:
    """The Pod range of Node `index` (the bridge plugin's host-local range on that Node)."""
    return f"10.88.{index}.0/24"
