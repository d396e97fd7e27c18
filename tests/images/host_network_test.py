"""The Host Image's network script, run for real in network namespaces made by the test, then
checked by sending TCP between them.

Topology (every address is inside namespaces this test makes; documentation ranges only):

    guest1 10.220.0.11 --+                         +-- eth0 192.0.2.2 ---- outside 192.0.2.1, .10
                          virbr-battery 10.220.0.1  |    default route       203.0.113.1 (internet)
    guest2 10.220.0.12 --+        (host)            |                        198.51.100.1 (protected)
                                                    |                        169.254.169.254 (IMDS)
                                                    +-- eth1 198.18.0.2 ---- other 198.18.0.1

The guests' veths stand for flintlockd's TAPs, attached to the bridge after the script made it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from images.hostfs import LIBEXEC, FakeHost, have, require_root

PROBE = Path(__file__).with_name("netprobe.py")
PYTHON = "/usr/bin/python3"
"""The system's Python runs the probes: other UIDs must be able to execute it."""

HOST_CONF = """\
PROTECTED_CIDRS=198.51.100.0/24
FLINTLOCKD_CLIENT_CIDRS=192.0.2.8/29
GATEWAY_SERVICE_PORTS=8053
GATEWAY_SERVICE_UIDS=1500
"""
AGENT_UID = 65532


@dataclass
class Net:
    prefix: str
    probe: Path
    host: FakeHost

    def ns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def sh(self, ns: str | None, *argv: str, check: bool = True) -> str:
        cmd = ["ip", "netns", "exec", self.ns(ns), *argv] if ns else list(argv)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)}: {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def probe_cmd(self, ns: str, host: str, port: int, source: str = "", uid: int = 0) -> list[str]:
        cmd = ["ip", "netns", "exec", self.ns(ns)]
        if uid:
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return [
            *cmd,
            PYTHON,
            str(self.probe),
            "connect",
            host,
            str(port),
            *([source] if source else []),
        ]


def _link(net: Net, a: str, a_if: str, b: str, b_if: str) -> None:
    tmp_a, tmp_b = f"{net.prefix[:6]}a{a_if}", f"{net.prefix[:6]}b{b_if}"
    net.sh(None, "ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
    net.sh(None, "ip", "link", "set", tmp_a, "netns", net.ns(a), "name", a_if)
    net.sh(None, "ip", "link", "set", tmp_b, "netns", net.ns(b), "name", b_if)
    net.sh(a, "ip", "link", "set", a_if, "up")
    net.sh(b, "ip", "link", "set", b_if, "up")


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    require_root("the network test")
    for tool in ("ip", "nft", "setpriv"):
        have(tool)
    # The probe must be readable by the unprivileged UIDs it runs as.
    shared = Path(tempfile.mkdtemp(prefix="bo-netprobe-"))
    shared.chmod(0o755)
    probe = shared / "netprobe.py"
    shutil.copy(PROBE, probe)
    probe.chmod(0o755)
    net = Net(
        f"bo{os.getpid() % 100000}", probe, FakeHost(tmp_path_factory.mktemp("host") / "root")
    )
    names = ("host", "outside", "other", "guest1", "guest2")
    servers: list[subprocess.Popen[str]] = []
    try:
        for name in names:
            net.sh(None, "ip", "netns", "add", net.ns(name))
            net.sh(name, "ip", "link", "set", "lo", "up")
        _link(net, "host", "eth0", "outside", "eth0")
        _link(net, "host", "eth1", "other", "eth0")
        net.sh("host", "ip", "addr", "add", "192.0.2.2/24", "dev", "eth0")
        net.sh("host", "ip", "route", "add", "default", "via", "192.0.2.1")
        net.sh("host", "ip", "addr", "add", "198.18.0.2/24", "dev", "eth1")
        net.sh("outside", "ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
        net.sh("outside", "ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
        for address in ("203.0.113.1/32", "198.51.100.1/32", "169.254.169.254/32"):
            net.sh("outside", "ip", "addr", "add", address, "dev", "lo")
        net.sh("other", "ip", "addr", "add", "198.18.0.1/24", "dev", "eth0")
        net.sh("other", "ip", "route", "add", "default", "via", "198.18.0.2")
        net.sh("outside", "ip", "route", "add", "198.18.0.0/24", "via", "192.0.2.2")

        # The Host's boot: host.conf -> host.env, then the network script in the host namespace.
        net.host.write_host_conf(HOST_CONF)
        assert net.host.run("host-config.sh").returncode == 0
        for _ in range(2):  # run twice: a second run replaces what the first made
            done = subprocess.run(
                ["ip", "netns", "exec", net.ns("host"), "bash", str(LIBEXEC / "network.sh")],
                env=net.host.env(),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr

        # A DNAT rule of someone else's (a kube-proxy, say) that would send a protected address
        # to an allowed one: HI-076 drops the packet before it applies.
        subprocess.run(
            ["ip", "netns", "exec", net.ns("host"), "nft", "-f", "-"],
            input=(
                "table ip other {\n chain pre {\n  type nat hook prerouting priority dstnat;\n"
                "  ip daddr 198.51.100.2 tcp dport 80 dnat to 203.0.113.1\n }\n}\n"
            ),
            text=True,
            check=True,
        )

        # flintlockd attaches each MicroVM's TAP to the bridge; veths stand in for them here.
        for i, guest in ((1, "guest1"), (2, "guest2")):
            _link(net, "host", f"tap{i}", guest, "eth0")
            net.sh(
                "host", "ip", "link", "set", f"tap{i}", "master", net.host.names["BATTERY_BRIDGE"]
            )
            net.sh(guest, "ip", "addr", "add", f"10.220.0.{10 + i}/16", "dev", "eth0")
            net.sh(guest, "ip", "route", "add", "default", "via", "10.220.0.1")

        listen = {
            "host": (9090, 53, 8053, 10250),
            "outside": (80, 10250),
            "other": (80,),
            "guest2": (80,),
        }
        for ns, ports in listen.items():
            server = subprocess.Popen(
                ["ip", "netns", "exec", net.ns(ns), PYTHON, str(probe), "serve", *map(str, ports)],
                stdout=subprocess.PIPE,
                text=True,
            )
            servers.append(server)
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready"
        yield net
    finally:
        for server in servers:
            server.kill()
            server.wait()
        for name in names:
            subprocess.run(["ip", "netns", "del", net.ns(name)], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)


def probe_all(net: Net, cases: dict[str, tuple[str, str, int, str, int]]) -> dict[str, str]:
    """Run every probe at once (a dropped one waits its full timeout) and collect the answers."""
    running = {
        name: subprocess.Popen(net.probe_cmd(*case), stdout=subprocess.PIPE, text=True)
        for name, case in cases.items()
    }
    return {name: proc.communicate(timeout=30)[0].strip() for name, proc in running.items()}


@pytest.mark.req("HI-030", "HI-032", "HI-083")
def test_the_script_makes_the_bridge_forwarding_and_its_tables(net: Net) -> None:
    bridge = net.host.names["BATTERY_BRIDGE"]
    assert bridge == "virbr-battery"
    assert "inet 10.220.0.1/16" in net.sh("host", "ip", "-4", "addr", "show", "dev", bridge)
    assert net.sh("host", "cat", "/proc/sys/net/ipv4/ip_forward").strip() == "1"
    tables = net.sh("host", "nft", "list", "tables")
    assert "table inet battery" in tables
    flintlockd_env = net.host.path(net.host.names["BATTERY_FLINTLOCKD_ENV"]).read_text()
    assert "FLINTLOCKD_GRPC_ENDPOINT=192.0.2.2:9090\n" in flintlockd_env


@pytest.mark.req("HI-032", "HI-033", "HI-035", "HI-075", "HI-076", "HI-100")
def test_guests_reach_the_internet_through_nat_and_nothing_they_must_not(net: Net) -> None:
    got = probe_all(
        net,
        {
            "internet": ("guest1", "203.0.113.1", 80, "", 0),
            "protected": ("guest1", "198.51.100.1", 80, "", 0),
            "protected before dnat": ("guest1", "198.51.100.2", 80, "", 0),
            "dnat elsewhere": ("other", "198.51.100.2", 80, "", 0),
            "metadata": ("guest1", "169.254.169.254", 80, "", 0),
            "other interface": ("guest1", "198.18.0.1", 80, "", 0),
            "other guest": ("guest1", "10.220.0.12", 80, "", 0),
            "host to guest": ("host", "10.220.0.12", 80, "", 0),
        },
    )
    assert got == {
        "internet": "ok 192.0.2.2",  # HI-032: the guest leaves with the Host's address
        "protected": "timeout",
        "protected before dnat": "timeout",
        "dnat elsewhere": "ok 198.18.0.1",  # the DNAT rule works for traffic not from guests
        "metadata": "timeout",
        "other interface": "timeout",
        "other guest": "timeout",
        "host to guest": "ok 10.220.0.1",  # the guest's listener works: isolation, not absence
    }


@pytest.mark.req("HI-034", "HI-036", "HI-077", "HI-078", "HI-079")
def test_guests_reach_the_gateway_only_on_dns_and_gateway_service_ports(net: Net) -> None:
    got = probe_all(
        net,
        {
            "dns": ("guest1", "10.220.0.1", 53, "", 0),
            "gateway service": ("guest1", "10.220.0.1", 8053, "", 0),
            "flintlockd": ("guest1", "10.220.0.1", 9090, "", 0),
            "kubelet": ("guest1", "10.220.0.1", 10250, "", 0),
            "host's other address": ("guest1", "192.0.2.2", 53, "", 0),
            "gateway service from outside": ("outside", "192.0.2.2", 8053, "", 0),
            "kubelet from outside": ("outside", "192.0.2.2", 10250, "", 0),
        },
    )
    assert got == {
        "dns": "ok 10.220.0.11",
        "gateway service": "ok 10.220.0.11",
        "flintlockd": "timeout",
        "kubelet": "timeout",
        "host's other address": "timeout",
        "gateway service from outside": "timeout",
        "kubelet from outside": "ok 192.0.2.1",
    }


@pytest.mark.req("HI-069", "HI-070")
def test_flintlockd_answers_only_its_clients_and_the_exec_agents_uid(net: Net) -> None:
    got = probe_all(
        net,
        {
            "client network": ("outside", "192.0.2.2", 9090, "192.0.2.10", 0),
            "elsewhere": ("outside", "192.0.2.2", 9090, "192.0.2.1", 0),
            "agent uid": ("host", "192.0.2.2", 9090, "", AGENT_UID),
            "other uid": ("host", "192.0.2.2", 9090, "", 1000),
            "root": ("host", "127.0.0.1", 9090, "", 0),
        },
    )
    assert got == {
        "client network": "ok 192.0.2.10",
        "elsewhere": "timeout",
        "agent uid": "ok 192.0.2.2",
        "other uid": "refused",
        "root": "refused",
    }


@pytest.mark.req("HI-080")
def test_gateway_service_uids_reach_neither_metadata_nor_control_ports(net: Net) -> None:
    got = probe_all(
        net,
        {
            "service to metadata": ("host", "169.254.169.254", 80, "", 1500),
            "service to kubelet": ("host", "192.0.2.1", 10250, "", 1500),
            "other to metadata": ("host", "169.254.169.254", 80, "", 1501),
            "other to kubelet": ("host", "192.0.2.1", 10250, "", 1501),
        },
    )
    assert got == {
        "service to metadata": "timeout",
        "service to kubelet": "timeout",
        "other to metadata": "ok 192.0.2.2",
        "other to kubelet": "ok 192.0.2.2",
    }
