"""A Host's own services dying and coming back, as a crash or an OOM kill ends them.

`kill_runtime` SIGKILLs a Node's containerd and kubelet (their containers' shims, and so the
Pods' processes, run on, as on a Host); `restart_runtime` starts both again as their units
would (`Restart=always`), the kubelet on the credentials its TLS bootstrap left.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from batteryop.testing.kubenode import parts
from batteryop.testing.kubenode.node import NodeError

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode, Member

RUNTIME: tuple[str, ...] = ("kubelet", "containerd")


def kill_runtime(node: KubeNode, member: Member) -> None:
    for part in RUNTIME:
        proc = node.procs.pop(member.proc(part))
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)


def restart_runtime(node: KubeNode, member: Member, attempts: int = 5) -> None:
    """containerd, then the kubelet, until the Node is Ready again. The kubelet exits when
    containerd's CRI is not serving yet (it is still recovering its state); its unit's
    `Restart=always` starts it again, and so does this."""
    parts.start_containerd(node, member)
    flags = member.state / "var-lib-kubelet" / "kubeadm-flags.env"
    for _ in range(attempts):
        parts.start_kubelet(node, member, parts.read_env(flags))
        try:
            node.wait_node_ready(member)
            return
        except NodeError:
            if node.procs[member.proc("kubelet")].popen.poll() is None:
                raise  # running but not Ready in time: not a start that failed
    raise NodeError(f"the kubelet on {member.name} exited at each of {attempts} starts")
