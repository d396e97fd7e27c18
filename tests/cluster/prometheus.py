"""A real Prometheus on the real node, scraping the install and evaluating its alert rules
(issue 49, DP-110, TD-125).

Prometheus built from its pinned module (`3rdparty/go/prometheus`, `kubenode.binaries.
PROMETHEUS`, with Kubernetes service discovery and no other) runs as a host service inside the
first Node's network and mount namespaces, where every Pod address is routed (a Prometheus with
`hostNetwork` on that Node sees the same). Its targets come from Kubernetes service discovery's
`pod` role: it lists and watches the install namespace's Pods on the node's API server with the
cluster's CA and the token of a ServiceAccount allowed only that (`grant_discovery`), as a
platform team's Prometheus does. The relabelling (`RELABEL`) keeps, of each component's
container, the port that serves `/metrics` (`SCRAPED_PORTS`): the operator's and the CSR
approver's `metrics`, the host registry's `registry-metric`, the Exec Agent's `health` (on its
Host's address). battery's own metrics are on the Pod's loopback (DP-001): no Prometheus
outside the Pod can scrape them.

The rules are the release's (`manifests.alerts.groups()`), every expression as is; only each
rule's `for` is `DRILL_HOLD` and scraping and evaluation run every `INTERVAL`, so a drill takes
seconds where the production holds take minutes (`drill_rules`).

Prometheus has no watch API: its state is read from its HTTP API (`/api/v1/targets`,
`/api/v1/alerts`, `/api/v1/query`) every `POLL_SECONDS` until a condition holds or a deadline
passes (`Prometheus.until`).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

import yaml
from cluster.drills import Background, container_restarts

from batteryop.api import names
from batteryop.manifests import alerts, csr_approver, exec_agent, render
from batteryop.testing.controlplane.server import LoggedProcess
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.binaries import PROMETHEUS
from batteryop.testing.kubenode.node import KubeNode

T = TypeVar("T")

PORT: Final = 19090
"""Not 9090, Prometheus's default: flintlockd serves there on each Host (`names.FLINTLOCKD_PORT`)."""
INTERVAL: Final = "1s"
"""Scrape and evaluation interval of the drill (Prometheus' default is 1m)."""
DRILL_HOLD: Final = "5s"
"""Every rule's `for` in the drill; the release's holds are 2 to 10 minutes."""
POLL_SECONDS: Final = 0.25
DIRECT: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Prometheus is on the Nodes' bridge: never through a proxy the environment names."""
MONITORING_NAMESPACE: Final = "monitoring"
SERVICE_ACCOUNT: Final = "prometheus"
JOB: Final = "battery-operator"
SCRAPED_PORTS: Final = {
    render.OPERATOR_CONTAINER: render.METRICS_PORT_NAME,
    render.HOST_REGISTRY_CONTAINER: render.HOST_REGISTRY_METRICS_PORT_NAME,
    csr_approver.APPROVER_CONTAINER: "metrics",
    exec_agent.CONTAINER: exec_agent.HEALTH_PORT_NAME,
}
"""Each component's container, and the named port of it that serves `/metrics`."""


def drill_rules(hold: str = DRILL_HOLD) -> dict[str, Any]:
    """The release's rule groups, each rule's `for` set to `hold`; nothing else changed."""
    groups = alerts.groups()
    for group in groups:
        for rule in group["rules"]:
            rule["for"] = hold
    return {"groups": groups}


RELABEL: Final = [
    {
        "source_labels": [
            "__meta_kubernetes_pod_container_name",
            "__meta_kubernetes_pod_container_port_name",
        ],
        "regex": "|".join(f"{container};{port}" for container, port in SCRAPED_PORTS.items()),
        "action": "keep",
    },
    {
        "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "Succeeded|Failed",
        "action": "drop",
    },
    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "component"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
]
"""Of every container port of the install's Pods, keep each component's metrics port; label
each target with its component, Pod and Node. Kubernetes service discovery's `pod` role names."""


def scrape_config(api_server: str, ca_file: Path, token_file: Path) -> dict[str, Any]:
    """One job: every component of the install, found by Kubernetes service discovery's `pod`
    role in the install namespace on `api_server`."""
    return {
        "job_name": JOB,
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "api_server": api_server,
                "namespaces": {"names": [install.NAMESPACE]},
                "tls_config": {"ca_file": str(ca_file)},
                "authorization": {"credentials_file": str(token_file)},
            }
        ],
        "relabel_configs": RELABEL,
    }


def grant_discovery(node: KubeNode) -> str:
    """A ServiceAccount that may list and watch the install namespace's Pods and nothing
    else; a token for it."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": install.NAMESPACE},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": install.NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": SERVICE_ACCOUNT,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": MONITORING_NAMESPACE}
        ],
    }
    node.kubectl(["create", "namespace", MONITORING_NAMESPACE])
    node.kubectl(["create", "serviceaccount", SERVICE_ACCOUNT, "-n", MONITORING_NAMESPACE])
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all([role, binding]))
    token = node.kubectl(
        ["create", "token", SERVICE_ACCOUNT, "-n", MONITORING_NAMESPACE, "--duration=2h"]
    )
    return token.strip()


def scraped_containers(node: KubeNode) -> set[tuple[str, str]]:
    """(component, Pod) of every running container of the install that serves metrics."""
    pods = json.loads(node.kubectl(["get", "pods", "-n", install.NAMESPACE, "-o", "json"]))
    return {
        (c["name"], p["metadata"]["name"])
        for p in pods["items"]
        if p["status"].get("phase") == "Running"
        for c in p["spec"]["containers"]
        if c["name"] in SCRAPED_PORTS
    }


@dataclass
class Prometheus:
    """The pinned Prometheus, running in the first Node's namespaces; use `start()`."""

    node: KubeNode
    proc: LoggedProcess
    url: str

    NAME: ClassVar[str] = "prometheus"

    @classmethod
    @contextmanager
    def start(cls, node: KubeNode, folder: Path) -> Iterator[Prometheus]:
        """Prometheus with the drill's rules and the install's scrape job, until the block
        ends; it is stopped then."""
        folder.mkdir(parents=True, exist_ok=True)
        ca_file, token_file = folder / "ca.crt", folder / "token"
        ca_file.write_bytes(node.cp.ca.cert_pem)
        token_file.write_text(grant_discovery(node))
        token_file.chmod(0o600)
        (folder / "rules.yaml").write_text(yaml.safe_dump(drill_rules(), sort_keys=False))
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(folder / "rules.yaml")],
            "scrape_configs": [scrape_config(node.cp.url, ca_file, token_file)],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        with cls._run(node, folder) as prometheus:
            yield prometheus

    @classmethod
    @contextmanager
    def _run(cls, node: KubeNode, folder: Path) -> Iterator[Prometheus]:
        binary = PROMETHEUS.ensure()["prometheus"]
        listen = f"{node.members[0].address}:{PORT}"
        # Its own UTS namespace, named as its Node: Prometheus looks its host name up at each
        # configuration load (the scrape offsets' seed), and the machine's name is not in the
        # Node's /etc/hosts; that lookup timed out for 10 s.
        own_name = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"']
        proc = node.spawn(
            cls.NAME,
            [
                *own_name,
                node.members[0].name,
                str(binary),
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={listen}",
                "--storage.tsdb.retention.time=2h",
            ],
        )
        prometheus = cls(node, proc, f"http://{listen}")
        try:
            node.wait_for(
                "Prometheus ready",
                lambda: prometheus.get_text("/-/ready").startswith("Prometheus"),
                timeout=60,
                procs=[cls.NAME],
            )
            yield prometheus
        finally:
            prometheus.stop()
            shutil.rmtree(folder / "data", ignore_errors=True)

    def stop(self) -> None:
        self.node.procs.pop(self.NAME, None)
        if self.proc.popen.poll() is None:
            self.proc.popen.send_signal(signal.SIGTERM)
            try:
                self.proc.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.popen.kill()
                self.proc.popen.wait(timeout=10)

    # -- its HTTP API -------------------------------------------------------------------------

    def get_text(self, path: str) -> str:
        with DIRECT.open(self.url + path, timeout=5) as answer:
            return str(answer.read().decode())

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(self.get_text(f"/api/v1/{path}{query}"))
        assert body["status"] == "success", body
        return body["data"]

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def alerts(self) -> dict[str, dict[str, Any]]:
        """The active (pending or firing) alerts, by name."""
        return {a["labels"]["alertname"]: a for a in self.api("alerts")["alerts"]}

    def value(self, expr: str) -> float | None:
        """An instant query's one value (None when it returns no series)."""
        result = self.api("query", query=expr)["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def until(self, what: str, check: Callable[[], T | None], timeout: float) -> T:
        """`check()`'s first answer that is not None or False, read every `POLL_SECONDS`; an
        AssertionError naming `what`, with the active alerts and Prometheus's log, after
        `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.popen.poll() is not None:
                raise AssertionError(f"Prometheus exited:\n{self.proc.tail()}")
            answer = check()
            if answer is not None and answer is not False:
                return answer
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout:.0f} s; active alerts {self.alerts()}\n"
                    f"{self.proc.tail()}"
                )
            time.sleep(POLL_SECONDS)

    def state(self, alert: str) -> str:
        """`firing`, `pending` or `inactive`."""
        found = self.alerts().get(alert)
        return str(found["state"]) if found else "inactive"


@dataclass
class Timing:
    """One alert in the drill: seconds from the fault to pending and to firing, from the fix
    to cleared."""

    alert: str
    fault: str
    pending: float = 0.0
    firing: float = 0.0
    cleared: float = 0.0

    def line(self) -> str:
        return (
            f"{self.alert} ({self.fault}): pending {self.pending:.1f} s and firing "
            f"{self.firing:.1f} s after the fault, cleared {self.cleared:.1f} s after the fix"
        )


def fire(prometheus: Prometheus, timing: Timing, fault_at: float, timeout: float) -> dict[str, Any]:
    """Until `timing.alert` fires (after pending first); the firing alert. Records when."""

    def pending() -> bool:
        return prometheus.state(timing.alert) in ("pending", "firing")

    def firing() -> dict[str, Any] | None:
        found = prometheus.alerts().get(timing.alert)
        return found if found and found["state"] == "firing" else None

    prometheus.until(f"{timing.alert} pending", pending, timeout)
    timing.pending = time.monotonic() - fault_at
    alert = prometheus.until(f"{timing.alert} firing", firing, timeout)
    timing.firing = time.monotonic() - fault_at
    return alert


def clear(prometheus: Prometheus, timing: Timing, fixed_at: float, timeout: float) -> None:
    """Until `timing.alert` is no longer active. Records when."""
    prometheus.until(
        f"{timing.alert} cleared", lambda: prometheus.state(timing.alert) == "inactive", timeout
    )
    timing.cleared = time.monotonic() - fixed_at


@dataclass
class CrashLoop(Background):
    """battery crashing over and over, as a corrupt volume or an OOM kill makes it: its
    container SIGKILLed each time the kubelet has started it again (the kubelet's back-off
    between restarts grows, 10 s, 20 s, ...), until the `with` block ends."""

    node: KubeNode
    kills: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    JOIN_SECONDS: ClassVar[float] = 30.0

    def run(self) -> None:
        try:
            pod, restarts = container_restarts(self.node, render.BATTERY_CONTAINER)
            while not self.stop.is_set():
                self.node.kill_container(install.NAMESPACE, pod, render.BATTERY_CONTAINER)
                self.kills += 1
                restarts += 1
                while not self.stop.is_set() and not self._restarted(pod, restarts):
                    pass
        except BaseException as err:  # reported by the test
            self.error = err

    def _restarted(self, pod: str, restarts: int) -> bool:
        """Whether the kubelet has started battery's container `restarts` times (waits up to
        5 s, watched by kubectl)."""
        path = (
            f'{{.status.containerStatuses[?(@.name=="{render.BATTERY_CONTAINER}")].restartCount}}'
        )
        said = self.node.kubectl(
            [
                "wait",
                "-n",
                install.NAMESPACE,
                f"pod/{pod}",
                f"--for=jsonpath={path}={restarts}",
                "--timeout=5s",
            ],
            check=False,
        )
        return "condition met" in said


def host_report(node: KubeNode, node_name: str) -> tuple[str, str]:
    """The Exec Agent's ready annotation and reason on Node `node_name`."""
    meta = json.loads(node.kubectl(["get", "node", node_name, "-o", "json"]))["metadata"]
    annotations = meta.get("annotations") or {}
    return (
        annotations.get(names.EXEC_AGENT_READY_ANNOTATION, ""),
        annotations.get(names.EXEC_AGENT_REASON_ANNOTATION, ""),
    )
