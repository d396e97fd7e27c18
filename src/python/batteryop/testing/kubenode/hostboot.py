"""A Node booted as the Host Image boots a Host, before its kubelet starts (issue 47).

The image's files laid out under the Node's own root (`Member.state / "root"`, whose
`/etc/battery` and `/run/battery` are the Node's, see `machine.HOST_MOUNTPOINTS`), then its
boot steps, in their units' order, each the image's own script:

1. `host.conf`, as a platform team writes it (`write_host_conf`: flintlockd's clients are the
   Pod network and the Nodes);
2. `host-config.sh`: checks host.conf, writes host.env (HI-050);
3. `kubelet-config.sh`: kubelet.env, the kubelet's Node labels and system reserve (HI-060,
   HI-061, HI-074); bootc cannot run here, so the script takes its own path for a Host that
   bootc cannot describe (`host-image=unknown`);
4. `flintlockd-certs.sh`: flintlockd's certificate folder, for the Exec Agent (HI-067);
5. `network.sh`, in the Node's network namespace: the guest bridge `virbr-battery`,
   forwarding, NAT and the Host's firewall, and flintlockd.env, the address flintlockd serves
   on (HI-030..HI-037, HI-067, HI-069, HI-070).

The kubelet then reads kubelet.env as its unit does (`parts.start_kubelet`), and flintlockd
serves on flintlockd.env's address (`install.start_flintlockd`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import batteryop  # pants: no-infer-dep (the package folder itself, linked as the image's)
from batteryop import hostconf
from batteryop.testing.kubenode import parts
from batteryop.testing.kubenode.names import CLUSTER_POD_CIDR

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import Member

STEPS: Final = ("host-config.sh", "kubelet-config.sh", "flintlockd-certs.sh")
"""The boot steps run on the machine's side of the Node (files only), in order."""
IN_NETWORK: Final = "network.sh"
"""The boot step run inside the Node's network namespace, last."""


def boot(member: Member, nodes: Sequence[str]) -> None:
    """The Host Image's boot steps on `member` (see the module docstring); `nodes`: every
    Node's address (see `write_host_conf`)."""
    definition = parts.find_definition()
    root = member.state / "root"
    share = root / "usr/share/battery"
    share.mkdir(parents=True, exist_ok=True)
    shutil.copy2(definition / "usr/share/battery/image.env", share / "image.env")
    shutil.copy2(definition.parent / "versions.env", share / "versions.env")  # as the image's
    proc = root / "proc"
    proc.mkdir(exist_ok=True)
    shutil.copy2("/proc/meminfo", proc / "meminfo")  # the Node's memory is the machine's
    write_host_conf(root, nodes)
    # The boot steps run the image's Python (batteryop.hostimage) from the image's path.
    python = root / "usr/lib/battery/python"
    python.mkdir(parents=True, exist_ok=True)
    (python / "batteryop").symlink_to(Path(batteryop.__file__).parent)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BATTERY_ROOT": str(root),
        "BATTERY_LIB": str(definition / "usr/libexec/battery/lib.sh"),
        "PYTHON": sys.executable,
        "BATTERY_CPUS": str(os.cpu_count() or 1),
    }
    given = [f"{k}={v}" for k, v in env.items()]
    scripts = definition / "usr/libexec/battery"
    for step in STEPS:
        _run(step, ["env", "-i", *given, "bash", str(scripts / step)])
    _run(IN_NETWORK, member.ns.enter(["env", "-i", *given, "bash", str(scripts / IN_NETWORK)]))


class BootError(RuntimeError):
    """A boot step failed: its name, exit status and what it printed."""


def _run(step: str, argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BootError(f"{step}: exit {done.returncode}: {done.stderr.strip()}")


def write_host_conf(root: Path, nodes: Sequence[str]) -> None:
    """The Host's `host.conf` as a platform team writes it, every key but one its default:
    flintlockd answers only where battery calls from (HI-069). That is the operator Pod's
    network when its Pod runs on this Host; from another Node, the Pod's traffic to this
    Host's address leaves masqueraded as that Node's (the Pods' traffic out of the Pod range
    is, here as with Calico's `natOutgoing`), so the Nodes' own addresses too."""
    path = root / image_env_at(root)["BATTERY_HOST_CONF"].lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    clients = ",".join([CLUSTER_POD_CIDR, *(f"{address}/32" for address in nodes)])
    path.write_text(hostconf.render({"FLINTLOCKD_CLIENT_CIDRS": clients}))


def image_env_at(root: Path) -> dict[str, str]:
    return parts.read_env(root / "usr/share/battery/image.env")


def image_env(member: Member) -> dict[str, str]:
    """The Host Image's names (image.env) as the Node has them."""
    return image_env_at(member.state / "root")


def written(member: Member, name: str) -> dict[str, str]:
    """An env file a boot step wrote on the Node, by its image.env name: `BATTERY_HOST_ENV`
    (host-config.sh), `BATTERY_KUBELET_ENV` (kubelet-config.sh), `BATTERY_FLINTLOCKD_ENV`
    (network.sh)."""
    root = member.state / "root"
    return parts.read_env(root / image_env_at(root)[name].lstrip("/"))
