"""The cluster's footprint on this machine, and putting the machine back as it was.

Each Node runs inside one network namespace and one mount namespace of its own, held open by a
`sleep` started with `unshare` (`Namespaces`); every process of that Node joins both with
`nsenter`. So its bridge, routes, nftables (kube-proxy's), iptables chains (the kubelet's),
forwarding switch and conntrack entries, and every mount the kubelet and containerd make,
exist only in there and are gone when the last process in it ends. A bridge on the machine,
`BRIDGE`, joins the Nodes (one veth pair each): `GATEWAY` on the machine's side (the API
server listens there, so Pods reach it through the `kubernetes` Service), `node_address(i)` on
Node i's side (its InternalIP, where its Exec Agent and flintlockd listen). Each Node routes
the other Nodes' Pod ranges to their addresses across the bridge, and masquerades what its
Pods send out of the cluster's Pod range (`Namespaces.create`).

What is left outside, each undone by `Machine.restore()`:

- the bridge, and the veth pairs on it (deleted with their namespaces);
- an nftables table on the machine that drops anything the Nodes send to be forwarded
  elsewhere (towards the uplink); its counter shows whether anything tried (`dropped()`).
  Frames between two Nodes cross only the bridge (with br_netfilter they pass the forward
  hook too, in and out on the bridge: those are let through);
- the kernel settings the kubelet changes that are not per network namespace
  (`vm.overcommit_memory`, `kernel.panic`, `kernel.panic_on_oops`): recorded before, written
  back after;
- the kubelets' cgroups, all under one cgroup root (`CGROUP_ROOT`, one folder per Node) in
  each hierarchy;
- the mount points for the paths install.yaml mounts from the Host (`/etc/battery`,
  `/run/battery`), for the CNI plugins' cache (`/var/lib/cni`) and for the paths kubeadm and
  the kubelet fix (`/etc/kubernetes`, `/var/lib/kubelet`, `/var/log/containers`): created
  empty where missing, removed again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from batteryop.testing.processes import die_with_parent

GATEWAY: Final = "10.89.0.1"
LINK_PREFIX: Final = 24
BRIDGE: Final = "bop-nodes"
NODE_LINK: Final = "bop-node-n"
"""Each Node's end of its veth pair, inside its namespace."""
POD_NETWORK: Final = "10.88.0.0/16"
"""Every Node's Pod range lies in it (`names.pod_cidr`)."""
NFT_TABLE: Final = "batteryop_node"
CGROUP_ROOT: Final = "batteryop-node"
GLOBAL_SYSCTLS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
"""The kubelet's kernel settings that are not per network namespace."""
HOST_MOUNTPOINTS: Final = (
    "/etc/battery",
    "/run/battery",
    "/var/lib/cni",
    "/etc/kubernetes",
    "/var/lib/kubelet",
    "/var/log/containers",
)
"""install.yaml's hostPath roots, the CNI plugins' fixed cache, and the folders kubeadm and the
kubelet use whatever their configuration says; each Node sees its own folders there."""


def node_address(index: int) -> str:
    """Node `index`'s address on the bridge (10.89.0.2 for the first)."""
    return f"10.89.0.{index + 2}"


def host_link(index: int) -> str:
    """The machine's end of Node `index`'s veth pair."""
    return f"bop-node{index}-h"


NODE_ADDRESS: Final = node_address(0)


class MachineError(RuntimeError):
    """The node's namespaces or network could not be set up."""


def run(
    argv: Sequence[str], *, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise MachineError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


@dataclass
class Machine:
    """What the node changed on the machine, and how to undo it.

    Kept in `record_file` while the node runs, so a run that was killed before it could clean
    up is undone by the next one (`recover`)."""

    record_file: Path
    state: Path
    sysctls: dict[str, str] = field(default_factory=dict)
    created_dirs: list[Path] = field(default_factory=list)
    nft_table: bool = False
    bridge: bool = False

    @classmethod
    def recover(cls, record_file: Path) -> list[str]:
        """Undo what a killed run left (nothing when the last run stopped cleanly)."""
        if not record_file.is_file():
            return []
        saved = json.loads(record_file.read_text())
        left = cls(
            record_file,
            Path(saved["state"]),
            dict(saved["sysctls"]),
            [Path(p) for p in saved["created_dirs"]],
            nft_table=True,
            bridge=True,
        )
        # containerd's shims outlive it and hold the node's namespaces; each names the state
        # folder on its command line.
        kill_where(lambda pid: saved["state"] in _cmdline(pid))
        kill_where(lambda pid: pid in cgroup_pids())
        problems = left.restore()
        shutil.rmtree(left.state, ignore_errors=True)
        return problems

    def record(self) -> None:
        for key in GLOBAL_SYSCTLS:
            self.sysctls[key] = Path("/proc/sys", key).read_text().strip()
        self._save()

    def _save(self) -> None:
        self.record_file.write_text(
            json.dumps(
                {
                    "state": str(self.state),
                    "sysctls": self.sysctls,
                    "created_dirs": [str(p) for p in self.created_dirs],
                }
            )
        )

    def make_mountpoints(self) -> None:
        for path in map(Path, HOST_MOUNTPOINTS):
            if not path.exists():
                path.mkdir(parents=True)
                self.created_dirs.append(path)
        self._save()

    def add_bridge(self) -> None:
        """The bridge the Nodes' veth pairs join, `GATEWAY` on it."""
        run(["ip", "link", "delete", BRIDGE], check=False)  # left by a killed run
        self.bridge = True
        self._save()
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{GATEWAY}/{LINK_PREFIX}", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])

    def add_drop_rule(self) -> None:
        """Nothing the Nodes send is forwarded off this machine (the counter says if it
        tried); frames from one Node to another stay on the bridge."""
        run(["nft", "add", "table", "ip", NFT_TABLE])
        self.nft_table = True
        chain = ["ip", NFT_TABLE, "forward"]
        run(["nft", "add", "chain", *chain, "{ type filter hook forward priority -10 ; }"])
        run(["nft", "add", "rule", *chain, "iifname", BRIDGE, "oifname", BRIDGE, "accept"])
        run(["nft", "add", "rule", *chain, "iifname", BRIDGE, "counter", "drop"])

    def dropped(self) -> int:
        """Packets from the node that the drop rule stopped (0 unless something went out)."""
        out = run(["nft", "list", "chain", "ip", NFT_TABLE, "forward"]).stdout
        for line in out.splitlines():
            words = line.split()
            if "counter" in words and "drop" in words:
                return int(words[words.index("packets") + 1])
        raise MachineError(f"no counter in nft table {NFT_TABLE}:\n{out}")

    def restore(self) -> list[str]:
        """Undo everything; returns what could not be undone (empty when all went back)."""
        problems: list[str] = []
        for key, value in self.sysctls.items():
            try:
                Path("/proc/sys", key).write_text(value + "\n")
            except OSError as err:
                problems.append(f"sysctl {key}={value}: {err}")
        if self.nft_table:
            run(["nft", "delete", "table", "ip", NFT_TABLE], check=False)
            self.nft_table = False
        if self.bridge:
            run(["ip", "link", "delete", BRIDGE], check=False)
            self.bridge = False
        problems += remove_cgroups()
        for path in reversed(self.created_dirs):
            try:
                path.rmdir()
            except OSError as err:
                problems.append(f"rmdir {path}: {err}")
        self.created_dirs.clear()
        if not problems:
            self.record_file.unlink(missing_ok=True)
        return problems


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def cgroup_pids() -> set[int]:
    """Every process in the kubelet's cgroups (the Pods' containers)."""
    pids: set[int] = set()
    for root in cgroup_dirs():
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def kill_where(match: Callable[[int], bool], spare: int | None = None) -> None:
    """SIGKILL every process (but this one and `spare`) for which `match(pid)` holds."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (spare, os.getpid()):
            continue
        with contextlib.suppress(OSError):
            if match(int(entry.name)):
                pids.append(int(entry.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def make_cgroups(nodes: Sequence[str]) -> None:
    """The cluster's cgroup root in each hierarchy, and one folder in it per Node (each
    kubelet's `cgroupRoot`, which it requires to exist)."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir():
        if not (hierarchy / "cgroup.procs").is_file():
            continue
        root = hierarchy / CGROUP_ROOT
        for folder, parent in ((root, hierarchy), *((root / n, root) for n in nodes)):
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # cgroup v1 starts a cpuset empty
                if (folder / name).is_file() and not (folder / name).read_text().strip():
                    (folder / name).write_text((parent / name).read_text())


def cgroup_dirs() -> list[Path]:
    """The node's cgroup root in each mounted hierarchy (those that exist)."""
    base = Path("/sys/fs/cgroup")
    found = [base / CGROUP_ROOT] if (base / CGROUP_ROOT).is_dir() else []
    found += [d / CGROUP_ROOT for d in base.iterdir() if (d / CGROUP_ROOT).is_dir()]
    return found


def remove_cgroups(timeout: float = 10.0) -> list[str]:
    """Remove the node's cgroups, deepest first (a cgroup goes once its processes have)."""
    problems = []
    for root in cgroup_dirs():
        deadline = time.monotonic() + timeout
        for folder in [*sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True), root]:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if time.monotonic() > deadline:
                        problems.append(f"cgroup {folder}: {err}")
                        break
                    time.sleep(0.1)  # the kernel frees a cgroup shortly after its last task
    return problems


@dataclass
class Namespaces:
    """A network and a mount namespace held open by one process; `enter()` joins both."""

    holder: subprocess.Popen[bytes]
    link: str

    @classmethod
    def create(cls, binds: dict[str, Path], *, index: int, pod_ranges: Sequence[str]) -> Namespaces:
        """Node `index`'s namespaces, its veth pair on the bridge, a route to each other
        Node's Pod range (`pod_ranges[i]` is Node i's), the masquerade of what its Pods send
        out of `POD_NETWORK`, and `binds` (path inside <- folder outside)."""
        link = host_link(index)
        run(["ip", "link", "delete", link], check=False)  # left by a killed run
        holder = subprocess.Popen(
            die_with_parent(
                ["unshare", "--net", "--mount", "--propagation", "private", "sleep", "infinity"]
            ),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        ns = cls(holder, link)
        try:
            ns._wait_unshared()
            pid = str(holder.pid)
            run(
                ["ip", "link", "add", link, "type", "veth", "peer", "name", NODE_LINK, "netns", pid]
            )
            run(["ip", "link", "set", link, "master", BRIDGE, "up"])
            address = node_address(index)
            steps = [
                ["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", f"{address}/{LINK_PREFIX}", "dev", NODE_LINK],
                ["ip", "link", "set", NODE_LINK, "up"],
                ["ip", "route", "add", "default", "via", GATEWAY],
                ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],  # this namespace's own
            ]
            steps += [
                ["ip", "route", "add", cidr, "via", node_address(other)]
                for other, cidr in enumerate(pod_ranges)
                if other != index
            ]
            for argv in steps:
                run(ns.enter(argv))
            run(ns.enter(["nft", "-f", "-"]), stdin=_masquerade(pod_ranges[index]))
            for inside, outside in binds.items():
                if not outside.is_file():  # a file is bound over a file, a folder over one
                    outside.mkdir(parents=True, exist_ok=True)
                run(ns.enter(["mount", "--bind", str(outside), inside]))
        except BaseException:
            ns.close()
            raise
        return ns

    def _wait_unshared(self, timeout: float = 10.0) -> None:
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.holder.poll() is not None:
                raise MachineError(f"unshare exited with {self.holder.returncode}")
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{self.holder.pid}/ns/net") != mine:
                    return
            time.sleep(0.01)  # nothing to watch: unshare changes namespace, then execs sleep
        raise MachineError("unshare did not enter its namespaces")

    def enter(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the node's namespaces."""
        return ["nsenter", f"--target={self.holder.pid}", "--net", "--mount", "--", *argv]

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)
        run(["ip", "link", "delete", self.link], check=False)


def _masquerade(pod_range: str) -> str:
    """What a Node's Pods send out of the cluster's Pod range leaves with the Node's address;
    Pod to Pod, across Nodes too, keeps the Pods' own (the bridge plugin's ipMasq would
    masquerade everything off the Node's own range)."""
    return (
        "table ip batteryop_pods {\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f"    ip saddr {pod_range} ip daddr != {POD_NETWORK} masquerade\n"
        "  }\n"
        "}\n"
    )
