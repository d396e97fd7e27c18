"""Nodes join the cluster with `kubeadm join`, as a Host joins (issue 47, HI-003).

The control plane is the harness's own (`testing.controlplane`), not one `kubeadm init` made:
so `prepare` does for it what `kubeadm init` does for a joining Node, with kubeadm's own
phases against its API server (`upload-config kubeadm`, `upload-config kubelet`,
`bootstrap-token`: the ClusterConfiguration and the kubelet's configuration in ConfigMaps, a
bootstrap token, the `cluster-info` ConfigMap, and the RBAC that lets a token holder post its
kubelet's certificate request and have it approved). kube-controller-manager then signs
`cluster-info` for the token (its bootstrapsigner) and approves and signs the kubelet's client
certificate request (csrapproving, csrsigning with the cluster's CA): the TLS bootstrap of a
real cluster. Every Node is a worker joined this way; none is the control plane's.

`join` runs `kubeadm join` inside a Node's namespaces. kubeadm writes the kubelet's files
(`/var/lib/kubelet/config.yaml`, `kubeadm-flags.env`, `/etc/kubernetes/bootstrap-kubelet.conf`,
the CA) and asks systemd to start the kubelet: there is no systemd here, so the harness starts
it (`parts.start_kubelet`), with the command line of the Host Image's unit
(`kubelet.service.d/20-battery.conf`), once those files are there. kubeadm then waits for the
kubelet's TLS bootstrap to finish, and exits.

The kubelet asks for its serving certificate by CSR too (`serverTLSBootstrap`), so the API
server can check it (`--kubelet-certificate-authority`); kube-controller-manager never approves
those, and kubeadm's documentation leaves it to the cluster's admin: `approve_serving` does it,
for the Node's own name and address only.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import secrets
import string
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from batteryop.testing.kubenode import parts
from batteryop.testing.kubenode.machine import GATEWAY
from batteryop.testing.kubenode.names import (
    CLUSTER_DOMAIN,
    CLUSTER_POD_CIDR,
    DNS_ADDRESS,
    SERVICE_CIDR,
)

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode, Member

API: Final = "kubeadm.k8s.io/v1beta4"
KUBERNETES_VERSION: Final = "v1.36.3"
"""The pin of `3rdparty/go/controlplane` (kubeadm refuses to guess it without the internet)."""
TOKEN_GROUP: Final = "system:bootstrappers:kubeadm:default-node-token"
SERVING_SIGNER: Final = "kubernetes.io/kubelet-serving"

PREFLIGHT_SKIPPED: Final[Mapping[str, str]] = {
    "SystemVerification": (
        "this machine has cgroup v1, which Kubernetes 1.35+ refuses unless the kubelet says "
        "failCgroupV1: false (it does) and this check is skipped"
    ),
}
"""The preflight checks this machine cannot pass, each with why; every other check runs."""


class JoinError(RuntimeError):
    """kubeadm could not prepare the control plane or join a Node."""


def new_token() -> str:
    """A bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`."""
    alphabet = string.ascii_lowercase + string.digits
    pick = "".join(secrets.choice(alphabet) for _ in range(22))
    return f"{pick[:6]}.{pick[6:]}"


def ca_cert_hash(ca_pem: bytes) -> str:
    """`sha256:<hex>` of the CA's public key (SubjectPublicKeyInfo), as kubeadm pins it."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def kubelet_configuration() -> dict[str, Any]:
    """What every Node's kubelet shares (the `kubelet-config` ConfigMap); the settings this
    machine needs are explained in `node.py`'s docstring."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "serverTLSBootstrap": True,
        "rotateCertificates": True,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [DNS_ADDRESS],
        "clusterDomain": CLUSTER_DOMAIN,
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


def init_configuration(endpoint: str, token: str) -> list[dict[str, Any]]:
    """The documents `kubeadm init` would have been given for this control plane."""
    host, port = endpoint.rsplit(":", 1)
    return [
        {
            "apiVersion": API,
            "kind": "InitConfiguration",
            "bootstrapTokens": [
                {
                    "token": token,
                    "ttl": "24h",
                    "usages": ["signing", "authentication"],
                    "groups": [TOKEN_GROUP],
                    "description": "batteryop's real-node harness",
                }
            ],
            "localAPIEndpoint": {"advertiseAddress": host, "bindPort": int(port)},
            "nodeRegistration": {"criSocket": "unix:///run/containerd/containerd.sock"},
        },
        {
            "apiVersion": API,
            "kind": "ClusterConfiguration",
            "kubernetesVersion": KUBERNETES_VERSION,
            "controlPlaneEndpoint": endpoint,
            "networking": {
                "dnsDomain": CLUSTER_DOMAIN,
                "serviceSubnet": SERVICE_CIDR,
                "podSubnet": CLUSTER_POD_CIDR,
            },
        },
        kubelet_configuration(),
    ]


def prepare(node: KubeNode) -> str:
    """The control plane's side of a join (see the module docstring); returns the token."""
    token = new_token()
    endpoint = node.cp.url.removeprefix("https://")
    if not endpoint.startswith(f"{GATEWAY}:"):
        raise JoinError(f"the API server listens on {endpoint}, not on the Nodes' gateway")
    config = node.state / "kubeadm-init.yaml"
    config.write_text(yaml.safe_dump_all(init_configuration(endpoint, token)))
    for phase in (
        ["upload-config", "kubeadm"],
        ["upload-config", "kubelet"],
        ["bootstrap-token", "--skip-token-print"],  # no secret in a log
    ):
        node.run_logged(
            "kubeadm-init",
            [
                str(node.bins.kubeadm),
                "init",
                "phase",
                *phase,
                f"--config={config}",
                f"--kubeconfig={node.cp.admin_kubeconfig}",
            ],
        )
    return token


def join_configuration(member: Member, endpoint: str, token: str, ca_pem: bytes) -> dict:
    return {
        "apiVersion": API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": endpoint,
                "token": token,
                "caCertHashes": [ca_cert_hash(ca_pem)],
            },
        },
        "nodeRegistration": {
            "name": member.name,
            "criSocket": f"unix://{member.containerd_socket}",
            "taints": [],
            "kubeletExtraArgs": [{"name": "node-ip", "value": member.address}],
            "ignorePreflightErrors": sorted(k.lower() for k in PREFLIGHT_SKIPPED),
        },
        "patches": {"directory": str(member.state / "kubeadm-patches")},
        "timeouts": {"tlsBootstrap": "3m", "kubeletHealthCheck": "3m"},
    }


def node_patch(member: Member) -> dict[str, Any]:
    """What differs per Node in its kubelet's configuration (a kubeadm patch): its own
    cgroup root, resolv.conf and Pod log folder."""
    resolv = member.state / "resolv.conf"
    resolv.write_text(f"nameserver {DNS_ADDRESS}\n")
    return {
        "cgroupRoot": f"/{member.cgroup}",
        "resolvConf": str(resolv),
        "podLogsDir": str(member.state / "pod-logs"),
    }


def join(node: KubeNode, member: Member, token: str) -> None:
    """`kubeadm join` on `member`, the kubelet started once kubeadm wrote its files; returns
    when kubeadm has seen the TLS bootstrap through."""
    endpoint = node.cp.url.removeprefix("https://")
    patches = member.state / "kubeadm-patches"
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "kubeletconfiguration+merge.yaml").write_text(yaml.safe_dump(node_patch(member)))
    config = member.state / "kubeadm-join.yaml"
    config.write_text(
        yaml.safe_dump(join_configuration(member, endpoint, token, node.cp.ca.cert_pem))
    )
    path = f"{node.bins.kubelet.parent}:/usr/sbin:/usr/bin:/sbin:/bin"  # the kubelet's version
    joining = node.spawn(
        member.proc("kubeadm-join"),
        [str(node.bins.kubeadm), "join", f"--config={config}", "--v=1"],
        member=member,
        env={"PATH": path, "HOME": str(member.state)},
    )
    flags = member.state / "var-lib-kubelet" / "kubeadm-flags.env"
    node.wait_for(
        f"kubeadm join on {member.name} writes the kubelet's files",
        lambda: flags.is_file() and (member.state / "var-lib-kubelet" / "config.yaml").is_file(),
        procs=[member.proc("kubeadm-join")],
    )
    parts.start_kubelet(node, member, parts.read_env(flags))
    node.wait_for(
        f"kubeadm join on {member.name} completes",
        lambda: joining.popen.poll() is not None,
        timeout=240,
        procs=[member.proc("kubelet")],
    )
    if joining.popen.returncode != 0:
        raise JoinError(
            f"kubeadm join on {member.name}: exit {joining.popen.returncode}:\n{joining.tail()}"
        )


def approvable(csr: Mapping[str, Any], nodes: Mapping[str, str]) -> str | None:
    """Why a kubelet serving request from one of `nodes` (name -> address) may not be approved,
    or None when it may: from `system:node:<name>`, for that Node's name and address only."""
    spec = csr.get("spec", {})
    if spec.get("signerName") != SERVING_SIGNER:
        return f"signer {spec.get('signerName')!r} is not {SERVING_SIGNER}"
    user = str(spec.get("username", ""))
    name = user.removeprefix("system:node:")
    if name == user or name not in nodes:
        return f"requested by {user!r}, not by one of the harness's Nodes"
    request = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subject alternative names"
    dns = set(sans.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    if not dns <= {name} or not ips <= {str(ipaddress.ip_address(nodes[name]))}:
        return f"names {sorted(dns | ips)} are not {name}'s own"
    return None


def serving_pending(node: KubeNode) -> set[str]:
    """The Nodes whose kubelet serving certificate is not issued yet, approving first each
    request of theirs that `approvable` allows."""
    approve_serving(node, node.members)
    found = json.loads(node.kubectl(["get", "csr", "-o", "json"]))
    issued = {
        str(c["spec"]["username"]).removeprefix("system:node:")
        for c in found.get("items", [])
        if c["spec"].get("signerName") == SERVING_SIGNER and c.get("status", {}).get("certificate")
    }
    return {m.name for m in node.members} - issued


def approve_serving(node: KubeNode, nodes: Sequence[Member]) -> list[str]:
    """Approve every pending kubelet serving request of `nodes` that `approvable` allows;
    returns the names approved."""
    want = {m.name: m.address for m in nodes}
    found = json.loads(node.kubectl(["get", "csr", "-o", "json"]))
    approved = []
    for csr in found.get("items", []):
        if csr.get("status", {}).get("conditions"):
            continue  # decided already
        if approvable(csr, want) is None:
            node.kubectl(["certificate", "approve", csr["metadata"]["name"]])
            approved.append(csr["metadata"]["name"])
    return approved
