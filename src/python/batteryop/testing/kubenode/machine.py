"""The node's footprint on this machine, and putting the machine back as it was.

The node runs inside one network namespace and one mount namespace of its own, held open by a
`sleep` started with `unshare` (`Namespaces`); every node process joins both with `nsenter`.
So its bridge, routes, nftables (kube-proxy's), iptables chains (the kubelet's), forwarding
switch and conntrack entries, and every mount the kubelet and containerd make, exist only in
there and are gone when the last process in it ends. A veth pair joins it to the machine:
`GATEWAY` on the machine's side (the API server listens there, so Pods reach it through the
`kubernetes` Service), `NODE_ADDRESS` on the node's side (the Node's InternalIP, where the
Exec Agent and flintlockd listen).

What is left outside, each undone by `Machine.restore()`:

- an nftables table on the machine that drops anything the node sends to be forwarded
  elsewhere (towards the uplink); its counter shows whether anything tried (`dropped()`);
- the kernel settings the kubelet changes that are not per network namespace
  (`vm.overcommit_memory`, `kernel.panic`, `kernel.panic_on_oops`): recorded before, written
  back after;
- the kubelet's cgroups, all under one cgroup root (`CGROUP_ROOT`) in each hierarchy;
- the mount points for the paths install.yaml mounts from the Host (`/etc/battery`,
  `/run/battery`) and for the CNI plugins' cache (`/var/lib/cni`): created empty where
  missing, removed again.
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
NODE_ADDRESS: Final = "10.89.0.2"
LINK_PREFIX: Final = 30
HOST_LINK: Final = "bop-node-h"
NODE_LINK: Final = "bop-node-n"
NFT_TABLE: Final = "batteryop_node"
CGROUP_ROOT: Final = "batteryop-node"
GLOBAL_SYSCTLS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
"""The kubelet's kernel settings that are not per network namespace."""
HOST_MOUNTPOINTS: Final = ("/etc/battery", "/run/battery", "/var/lib/cni")
"""install.yaml's hostPath roots and the CNI plugins' fixed cache; the node sees its own
folders there."""


class MachineError(RuntimeError):
    """The node's namespaces or network could not be set up."""


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
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
        )
        # containerd's shims outlive it and hold the node's namespaces; each names the state
        # folder on its command line.
        kill_where(lambda pid: saved["state"] in _cmdline(pid))
        kill_where(lambda pid: pid in cgroup_pids())
        run(["ip", "link", "delete", HOST_LINK], check=False)
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

    def add_drop_rule(self) -> None:
        """Nothing the node sends is forwarded off this machine (the counter says if it tried)."""
        run(["nft", "add", "table", "ip", NFT_TABLE])
        self.nft_table = True
        chain = ["ip", NFT_TABLE, "forward"]
        run(["nft", "add", "chain", *chain, "{ type filter hook forward priority -10 ; }"])
        run(["nft", "add", "rule", *chain, "iifname", HOST_LINK, "counter", "drop"])

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


def make_cgroups() -> None:
    """The node's cgroup root in each hierarchy (the kubelet requires it to exist)."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir():
        if not (hierarchy / "cgroup.procs").is_file():
            continue
        root = hierarchy / CGROUP_ROOT
        root.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # cgroup v1 starts a cpuset empty
            if (root / name).is_file() and not (root / name).read_text().strip():
                (root / name).write_text((hierarchy / name).read_text())


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

    @classmethod
    def create(cls, binds: dict[str, Path]) -> Namespaces:
        """The namespaces, the veth pair, and `binds` (path inside <- folder outside)."""
        run(["ip", "link", "delete", HOST_LINK], check=False)  # left by a killed run
        holder = subprocess.Popen(
            die_with_parent(
                ["unshare", "--net", "--mount", "--propagation", "private", "sleep", "infinity"]
            ),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        ns = cls(holder)
        try:
            ns._wait_unshared()
            pid = str(holder.pid)
            run(
                [
                    "ip",
                    "link",
                    "add",
                    HOST_LINK,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    NODE_LINK,
                    "netns",
                    pid,
                ]
            )
            run(["ip", "addr", "add", f"{GATEWAY}/{LINK_PREFIX}", "dev", HOST_LINK])
            run(["ip", "link", "set", HOST_LINK, "up"])
            for argv in (
                ["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", f"{NODE_ADDRESS}/{LINK_PREFIX}", "dev", NODE_LINK],
                ["ip", "link", "set", NODE_LINK, "up"],
                ["ip", "route", "add", "default", "via", GATEWAY],
                ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],  # this namespace's own
            ):
                run(ns.enter(argv))
            for inside, outside in binds.items():
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
        run(["ip", "link", "delete", HOST_LINK], check=False)
