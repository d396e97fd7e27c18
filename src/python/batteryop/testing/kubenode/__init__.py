"""A real Kubernetes node on this machine for the cluster tests and the local stack (issue 23):
the test control plane plus the kube-scheduler and kube-controller-manager, and a node of
containerd, runc, the kubelet, kube-proxy and CoreDNS in namespaces of its own. See `node`."""
