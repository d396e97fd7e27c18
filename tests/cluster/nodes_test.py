"""Two real Nodes joined as Hosts join a cluster (issue 47, items 1-3).

`KubeNode.start(nodes=2)`: each Node in namespaces of its own, configured from the Host
Image's files, joined by `kubeadm join` with a bootstrap token; the Pod network spans both
(the bridge plugin on each Node and a route to the other's Pod range). The checks:

- each Node joined by kubeadm: its kubelet's client certificate came by a CSR from the
  bootstrap token's identity that kube-controller-manager approved and signed, and names the
  Node; its serving certificate came by CSR for its own name and address;
- a Pod on one Node reaches a Pod on the other at the Pod's own address, and the server sees
  the client Pod's own address (no translation between Pods);
- Pods on the second Node resolve cluster names through CoreDNS on the first;
- `kubectl exec` and `kubectl logs` reach the second Node's kubelet;
- each Node booted as a Host boots (`hostboot`): its kubelet registered the Host labels and
  reserve kubelet-config.sh wrote, network.sh made the guest bridge and the Host's firewall,
  and the Node's address is its own, never the bridge's;
- nothing left the machine.

Join times are printed for the closing note.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from batteryop.api import names
from batteryop.testing.kubenode import hostboot, kubeadm
from batteryop.testing.kubenode.busybox import push_busybox
from batteryop.testing.kubenode.node import KubeNode, Member

NODES = 2
"""conftest's `node` fixture starts this many Nodes for this module."""
NAMESPACE = "nodes-test"
PORT = 8080


@pytest.fixture(scope="module")
def busybox(node: KubeNode) -> str:
    node.kubectl(["create", "namespace", NAMESPACE])
    return push_busybox(node)


def pod(name: str, member: Member, image: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": member.name},
            "restartPolicy": extra.pop("restart", "Always"),
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": image, "command": ["/busybox", "sh", "-c", script]}
            ],
            **extra,
        },
    }


def run_pod(node: KubeNode, spec: dict[str, Any], timeout: str = "120s") -> str:
    """Create a Pod that runs to its end; its log once it has succeeded."""
    name = spec["metadata"]["name"]
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(spec))
    node.kubectl(
        [
            "wait",
            "-n",
            NAMESPACE,
            f"pod/{name}",
            "--for=jsonpath={.status.phase}=Succeeded",
            f"--timeout={timeout}",
        ]
    )
    return node.kubectl(["logs", "-n", NAMESPACE, name])


def pod_json(node: KubeNode, name: str) -> dict[str, Any]:
    return json.loads(node.kubectl(["get", "pod", "-n", NAMESPACE, name, "-o", "json"]))


@pytest.mark.req("TD-118")
def test_each_node_joined_by_kubeadm_with_a_bootstrapped_client_certificate(
    node: KubeNode,
) -> None:
    print("\n" + ", ".join(f"{k}: {v:.1f} s" for k, v in node.timings.items()))
    assert [m.name for m in node.members] == ["batteryop-node", "batteryop-node-2"]
    csrs = json.loads(node.kubectl(["get", "csr", "-o", "json"]))["items"]
    token_id = kubeadm_token_id(node)
    clients = [
        c for c in csrs if c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    ]
    assert len(clients) == NODES
    for csr in clients:
        assert csr["spec"]["username"] == f"system:bootstrap:{token_id}"
        (approved,) = (c for c in csr["status"]["conditions"] if c["type"] == "Approved")
        assert approved["reason"] == "AutoApproved"  # kube-controller-manager's csrapproving
    ca = x509.load_pem_x509_certificate(node.cp.ca.cert_pem)
    for member in node.members:
        status = json.loads(node.kubectl(["get", "node", member.name, "-o", "json"]))["status"]
        assert {"type": "InternalIP", "address": member.address} in status["addresses"]
        pki = member.state / "var-lib-kubelet/pki"
        # A link to the file by its path inside the Node's mount namespace.
        pem = (pki / Path(os.readlink(pki / "kubelet-client-current.pem")).name).read_bytes()
        cert = x509.load_pem_x509_certificate(pem)
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
            f"system:node:{member.name}"
        )
        assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
            "system:nodes"
        )
        kubeconfig = yaml.safe_load((member.state / "etc-kubernetes/kubelet.conf").read_text())
        assert kubeconfig["users"][0]["user"]["client-certificate"].endswith(
            "kubelet-client-current.pem"
        )


def kubeadm_token_id(node: KubeNode) -> str:
    secrets = json.loads(
        node.kubectl(
            [
                "get",
                "secret",
                "-n",
                "kube-system",
                "--field-selector",
                "type=bootstrap.kubernetes.io/token",
                "-o",
                "json",
            ]
        )
    )["items"]
    (secret,) = secrets
    return str(secret["metadata"]["name"]).removeprefix("bootstrap-token-")


@pytest.mark.req("TD-119")
def test_each_kubelet_serves_with_a_certificate_for_its_own_name_and_address(
    node: KubeNode,
) -> None:
    csrs = json.loads(node.kubectl(["get", "csr", "-o", "json"]))["items"]
    serving = {
        str(c["spec"]["username"]).removeprefix("system:node:"): c
        for c in csrs
        if c["spec"]["signerName"] == kubeadm.SERVING_SIGNER and c["status"].get("certificate")
    }
    assert set(serving) == {m.name for m in node.members}
    for member in node.members:
        request = dict(serving[member.name])
        assert kubeadm.approvable(request, {member.name: member.address}) is None
        # The same request from another Node's identity, or for another address, is refused.
        other = {**request, "spec": {**request["spec"], "username": "system:node:intruder"}}
        assert kubeadm.approvable(other, {member.name: member.address}) is not None
        assert kubeadm.approvable(request, {member.name: "10.89.0.99"}) is not None


@pytest.mark.req("TD-119")
def test_pods_on_two_nodes_reach_each_other_at_their_own_addresses(
    node: KubeNode, busybox: str
) -> None:
    first, second = node.members
    # The server answers each connection with its own view of it (`netstat`): the address
    # it came from.
    server = pod(
        "server",
        second,
        busybox,
        f"while true; do /busybox nc -l -p {PORT} -e /busybox netstat -tn; done",
    )
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(server))
    node.kubectl(["wait", "-n", NAMESPACE, "pod/server", "--for=condition=Ready", "--timeout=120s"])
    server_ip = pod_json(node, "server")["status"]["podIP"]
    client = pod(
        "client",
        first,
        busybox,
        f"/busybox nc -w 5 {server_ip} {PORT} </dev/null; echo exit=$?",
        restart="Never",
    )
    out = run_pod(node, client)
    client_ip = pod_json(node, "client")["status"]["podIP"]
    assert in_range(server_ip, second.pod_cidr) and in_range(client_ip, first.pod_cidr)
    assert "exit=0" in out, out
    (seen,) = (
        words[4].removeprefix("::ffff:").rsplit(":", 1)[0]
        for words in map(str.split, out.splitlines())
        if len(words) > 4 and words[3].removeprefix("::ffff:") == f"{server_ip}:{PORT}"
    )
    assert seen == client_ip, f"the server saw {seen}, not {client_ip}:\n{out}"


def in_range(address: str, cidr: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)


@pytest.mark.req("TD-119")
def test_pods_on_the_second_node_resolve_cluster_names(node: KubeNode, busybox: str) -> None:
    second = node.members[1]
    out = run_pod(
        node,
        pod(
            "resolver",
            second,
            busybox,
            "/busybox nslookup kubernetes.default.svc.cluster.local; echo exit=$?",
            restart="Never",
        ),
    )
    assert "exit=0" in out and "10.96.0.1" in out, out


@pytest.mark.req("TD-119")
def test_kubectl_exec_and_logs_reach_the_second_nodes_kubelet(node: KubeNode, busybox: str) -> None:
    second = node.members[1]
    spec = pod("shell", second, busybox, "echo started; exec /busybox sleep 3600")
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(spec))
    node.kubectl(["wait", "-n", NAMESPACE, "pod/shell", "--for=condition=Ready", "--timeout=120s"])
    assert pod_json(node, "shell")["spec"]["nodeName"] == second.name
    assert node.kubectl(["exec", "-n", NAMESPACE, "shell", "--", "/busybox", "echo", "inside"]) == (
        "inside\n"
    )
    assert "started" in node.kubectl(["logs", "-n", NAMESPACE, "shell"])


def mebibytes(quantity: str) -> int:
    """A memory quantity as the kubelet reports it (`Ki`, `Mi` or plain bytes), in MiB."""
    for suffix, scale in (("Ki", 1024), ("Mi", 1024**2), ("Gi", 1024**3)):
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * scale // 1024**2
    return int(quantity) // 1024**2


@pytest.mark.req("TD-118", "HI-030", "HI-060", "HI-061", "HI-074", "HI-083")
def test_each_node_booted_as_a_host_before_its_kubelet_started(node: KubeNode) -> None:
    for member in node.members:
        body = json.loads(node.kubectl(["get", "node", member.name, "-o", "json"]))
        # HI-060, HI-074: the kubelet registered kubelet-config.sh's labels (no bootc here,
        # so the image's digest is unknown); HI-061: pods get only the Host reserve.
        args = hostboot.written(member, "BATTERY_KUBELET_ENV")["KUBELET_BATTERY_ARGS"]
        flags = dict(word.removeprefix("--").split("=", 1) for word in args.split())
        labels = dict(pair.split("=", 1) for pair in flags["node-labels"].split(","))
        assert labels[names.HOST_LABEL] == names.HOST_LABEL_VALUE
        assert labels[names.HOST_IMAGE_LABEL] == "unknown"
        assert labels.items() <= body["metadata"]["labels"].items()
        host = hostboot.written(member, "BATTERY_HOST_ENV")
        allocatable = mebibytes(body["status"]["allocatable"]["memory"])
        assert 0 < allocatable <= int(host["HOST_RESERVE_MEMORY_MB"]), body["status"]
        # HI-030: network.sh's guest bridge holds the gateway address; HI-083: the Node's
        # address in the cluster is its own, never the bridge's.
        bridge = hostboot.image_env(member)["BATTERY_BRIDGE"]
        shown = node.node_run(["ip", "-4", "-o", "addr", "show", "dev", bridge], member=member)
        assert f" {host['GUEST_GATEWAY']}/" in shown, shown
        assert "flintlockd_input" in node.node_run(
            ["nft", "list", "table", "inet", "battery"], member=member
        )
        internal = [a["address"] for a in body["status"]["addresses"] if a["type"] == "InternalIP"]
        assert internal == [member.address], body["status"]["addresses"]


@pytest.mark.req("TD-113")
def test_nothing_the_nodes_ran_sent_a_packet_off_the_machine(node: KubeNode) -> None:
    assert node.machine.dropped() == 0
