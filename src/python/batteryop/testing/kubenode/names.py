"""The one-node cluster's fixed names, addresses and image references (`node.KubeNode`).

Only one node runs on a machine at a time, so these are constants; `node.py` re-exports them.
"""

from __future__ import annotations

from typing import Final

from batteryop.testing.kubenode.machine import NODE_ADDRESS

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
