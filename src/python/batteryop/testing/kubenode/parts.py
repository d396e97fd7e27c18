"""The cluster's parts, each written out and started as a process (`node.KubeNode`).

One function per part: the registry, containerd (the Host Image's `config.toml` with the
changes this machine needs, `CONTAINERD_CHANGES`; its CNI and registry mirror config), the
kubelet (the Host Image's unit command on the files `kubeadm join` wrote), the kube-scheduler
and the kube-controller-manager (beside the control plane, outside the Nodes' namespaces),
kube-proxy, CoreDNS; and the identities they run as (RBAC the bootstrap roles lack, one
kubeconfig each; the kubelets get theirs by TLS bootstrap). The settings this machine needs are
explained in `node.py`'s docstring.
"""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from batteryop.hostimage.host_env import read_env as parse_env
from batteryop.testing.kubenode import binaries
from batteryop.testing.kubenode.names import (
    CLUSTER_DOMAIN,
    CLUSTER_POD_CIDR,
    COREDNS_USER,
    DNS_ADDRESS,
    MIRRORED_REGISTRIES,
    PAUSE_IMAGE,
    REGISTRY,
    REGISTRY_FOR_PODS,
    SERVICE_CIDR,
)
from batteryop.testing.oci_registry import registry_config
from batteryop.tls import CertificateAuthority

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode, Member

HOST_DEFINITION: Final = Path("src/images/host/rootfs")
CONTAINERD_CONFIG: Final = "etc/containerd/config.toml"
KUBELET_DROP_IN: Final = "usr/lib/systemd/system/kubelet.service.d/20-battery.conf"
CRI_RUNTIME: Final = "io.containerd.cri.v1.runtime"
CRI_IMAGES: Final = "io.containerd.cri.v1.images"
DEFINITION_ONLY: Final[Mapping[str, str]] = {
    f"plugins.{CRI_RUNTIME}.enable_selinux": "HI-066: no SELinux policy is loaded here",
    f"plugins.{CRI_RUNTIME}.containerd.runtimes.runc.options.SystemdCgroup": (
        "no systemd as PID 1 here: cgroupfs, as the kubelet's cgroupDriver"
    ),
    "plugins.io.containerd.snapshotter.v1.devmapper": (
        "HI-020: this kernel has no device-mapper (containerd is built without it)"
    ),
    "usr/lib/tmpfiles.d/battery.conf": (
        "HI-024, HI-082: systemd-tmpfiles makes /var's folders at boot and the image's tree "
        "links /opt, /usr/local and /usr/libexec/kubernetes there; made on this machine they "
        "would change its own folders, so each Node gets its own /etc/battery, /run/battery, "
        "/var/lib/kubelet and /etc/kubernetes instead"
    ),
}
"""The Host Image's settings that do not run on this machine, each with why; the requirement
pages say "definition only" for these."""

KUBEADM_DROP_IN: Final[Mapping[str, str]] = {
    "KUBELET_KUBECONFIG_ARGS": "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf "
    "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "KUBELET_CONFIG_ARGS": "--config=/var/lib/kubelet/config.yaml",
}
"""What the kubeadm package's own drop-in (`10-kubeadm.conf`, installed with the image's
kubeadm RPM, not in this repository) sets for the kubelet's unit."""


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
    identities: dict[str, tuple[str, list[str]]] = {
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


def start_containerd(node: KubeNode, member: Member) -> None:
    """containerd on `member`, configured by the Host Image's config.toml (`containerd_config`);
    the first Node pulls from the registry on its loopback, the others from its address."""
    folder = member.state / "containerd"
    certs = folder / "certs.d"
    server = REGISTRY if member.index == 0 else REGISTRY_FOR_PODS
    for registry in (*MIRRORED_REGISTRIES, REGISTRY):
        (certs / registry).mkdir(parents=True, exist_ok=True)
        (certs / registry / "hosts.toml").write_text(
            f'server = "http://{server}"\n\n[host."http://{server}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
    cni = folder / "net.d"
    cni.mkdir(parents=True, exist_ok=True)
    (cni / "10-batteryop.conflist").write_text(json.dumps(_cni_config(member), indent=2))
    config = folder / "config.toml"
    image = tomllib.loads((find_definition() / CONTAINERD_CONFIG).read_text())
    config.write_text(_toml(containerd_config(image, folder, cni, certs)))
    env = {**os.environ, "PATH": f"{node.bins.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    node.spawn(
        member.proc("containerd"),
        [str(node.bins.containerd), "--config", str(config)],
        member=member,
        env=env,
    )
    node.wait_for(
        f"containerd's socket on {member.name}",
        lambda: (folder / "containerd.sock").is_socket(),
        procs=[member.proc("containerd")],
    )
    member.containerd_socket = folder / "containerd.sock"


def start_kubelet(node: KubeNode, member: Member, kubeadm_env: Mapping[str, str]) -> None:
    """The kubelet on `member` as the Host Image's unit runs it: its ExecStart
    (`kubelet.service.d/20-battery.conf`) with the variables of kubeadm's drop-in, of the
    `kubeadm-flags.env` that `kubeadm join` wrote, and of the drop-in's own EnvironmentFile
    (kubelet.env, written at boot by kubelet-config.sh: `hostboot`), read inside the Node."""
    definition = find_definition()
    variables = {**KUBEADM_DROP_IN, **kubeadm_env}
    for path in kubelet_environment_files(definition):
        variables.update(parse_env(node.node_run(["cat", path], member=member)))
    argv = [str(node.bins.kubelet)]
    for word in shlex.split(kubelet_exec_start(definition)[1:]):
        if word.startswith("$"):
            argv += shlex.split(variables.get(word[1:], ""))
        else:
            argv.append(word)
    node.spawn(member.proc("kubelet"), [*argv, "--v=1"], member=member)


def read_env(path: Path) -> dict[str, str]:
    """An EnvironmentFile as systemd reads it: `KEY="value"` lines (`parse_env`)."""
    return parse_env(path.read_text())


def kubelet_environment_files(definition: Path) -> list[str]:
    """The EnvironmentFile= paths of the Host Image's kubelet drop-in (on the Host)."""
    return [
        line.removeprefix("EnvironmentFile=").lstrip("-")
        for line in (definition / KUBELET_DROP_IN).read_text().splitlines()
        if line.startswith("EnvironmentFile=")
    ]


def kubelet_exec_start(definition: Path) -> str:
    """The kubelet's command line in the Host Image's drop-in, without the program."""
    command = ""
    for line in (definition / KUBELET_DROP_IN).read_text().splitlines():
        if line.startswith("ExecStart="):
            command = line.removeprefix("ExecStart=")
    program, _, rest = command.partition(" ")
    if not program.endswith("/kubelet"):
        raise ValueError(f"{KUBELET_DROP_IN}: ExecStart runs {program!r}, not the kubelet")
    return " " + rest


def find_definition(start: Path | None = None) -> Path:
    """The Host Image's root filesystem definition in this checkout."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / HOST_DEFINITION / "usr/libexec/battery/lib.sh").is_file():
            return folder / HOST_DEFINITION
    raise FileNotFoundError(f"cannot find {HOST_DEFINITION} above {here}")


def start_control_plane_parts(
    node: KubeNode, kube: dict[str, Path], ca: CertificateAuthority
) -> None:
    pki = node.cp.workdir / "pki"
    signing = node.state / "pki" / "cluster-signing.key"
    signing.write_bytes(ca.pair.key_pem)
    signing.chmod(0o600)
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
            # kubeadm join's TLS bootstrap: cluster-info signed for the token, the kubelets'
            # requests approved (client) and signed (kubernetes.io signers only: the CSR
            # approver's signers stay the CSR approver's).
            "--controllers=*,bootstrapsigner,tokencleaner",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={signing}",
            # A Node whose kubelet stopped renewing its Lease is Ready=Unknown after this
            # (50 s by default; the kubelet renews every 10 s).
            "--node-monitor-grace-period=30s",
            # A test setting: the HorizontalPodAutoscaler reads its metrics and sets its
            # target's scale every second (15 s by default), so the autoscaling drill
            # (install_test.py, RS-106) measures the path rather than the period.
            "--horizontal-pod-autoscaler-sync-period=1s",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
        ],
        in_node=False,
    )


def start_kube_proxy(node: KubeNode, member: Member, kubeconfig: Path) -> None:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "clusterCIDR": CLUSTER_POD_CIDR,
        "hostnameOverride": member.name,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    path = member.state / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    node.spawn(
        member.proc("kube-proxy"), [str(node.bins.kube_proxy), f"--config={path}"], member=member
    )


def start_coredns(node: KubeNode, kubeconfig: Path) -> None:
    corefile = node.state / "Corefile"
    corefile.write_text(
        f".:53 {{\n  bind {DNS_ADDRESS}\n  errors\n  ready 127.0.0.1:8181\n"
        f"  kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"    kubeconfig {kubeconfig}\n    pods insecure\n"
        "    fallthrough in-addr.arpa ip6.arpa\n  }\n  cache 30\n}\n"
    )
    node.spawn("coredns", [str(node.bins.coredns), "-conf", str(corefile)])


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{**subject, "apiGroup": "rbac.authorization.k8s.io"}],
    }


def _cni_config(member: Member) -> dict[str, Any]:
    """The bridge plugin on `member`'s Pod range; Pods' traffic out of the cluster's Pod range
    is masqueraded by the Node's own rule (`machine.Namespaces.create`), not by the plugin, so
    Pods see each other's addresses across Nodes."""
    return {
        "cniVersion": "1.0.0",
        "name": "batteryop",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": member.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(member.state / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(image: dict[str, Any], folder: Path, cni: Path, certs: Path) -> dict:
    """The Host Image's containerd config with this machine's changes: its own folders and
    socket per Node, the settings in `DEFINITION_ONLY` taken out, and what the cluster here
    needs (`node.py`'s docstring)."""
    config = json.loads(json.dumps(image))  # a deep copy
    config.update(
        root=str(folder / "root"),
        state=str(folder / "state"),
        grpc={"address": str(folder / "containerd.sock")},
        ttrpc={"address": str(folder / "containerd.sock.ttrpc")},
    )
    plugins = config.setdefault("plugins", {})
    for key in DEFINITION_ONLY:
        if key.startswith("plugins."):
            _drop(plugins, key.removeprefix("plugins."))
    runtime = plugins.setdefault(CRI_RUNTIME, {})
    # this machine refuses the OOM scores the kubelet asks for (no CAP_SYS_RESOURCE)
    runtime["restrict_oom_score_adj"] = True
    runtime["netns_mounts_under_state_dir"] = True
    runtime["cni"] = {"bin_dirs": [str(binaries.CNI_DIR)], "conf_dir": str(cni)}
    images = plugins.setdefault(CRI_IMAGES, {})
    images["snapshotter"] = "overlayfs"
    images["pinned_images"] = {"sandbox": PAUSE_IMAGE}  # the default registry is unreachable
    images.setdefault("registry", {})["config_path"] = str(certs)
    return config


def _drop(table: dict[str, Any], dotted: str) -> None:
    """Remove `dotted` (plugin names hold dots: the longest key that matches wins)."""
    for end in range(len(dotted), 0, -1):
        head = dotted[:end]
        if head in table:
            rest = dotted[end + 1 :]
            if not rest:
                del table[head]
            elif isinstance(table[head], dict):
                _drop(table[head], rest)
            return


def _toml(config: Mapping[str, Any], prefix: str = "") -> str:
    """TOML for a containerd config: tables of strings, booleans, numbers and lists."""
    lines, tables = [], []
    for key, value in config.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{_key(key)} = {json.dumps(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, value in tables:
        name = f"{prefix}.{_key(key)}" if prefix else _key(key)
        out += f"\n[{name}]\n" + _toml(value, name)
    return out


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)
