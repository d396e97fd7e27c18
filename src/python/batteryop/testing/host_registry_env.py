"""The host registry's surroundings in tests, the benchmark and the dev stack: the battery
container of the operator Pod, played on one machine, and the registry as its own process.

`BatteryPod` stands in for what the kubelet does for the battery container:
- it keeps `config_dir/config.json` equal to the battery config ConfigMap's `config.json`,
  following the ConfigMap by list and watch and replacing the file atomically (as a ConfigMap
  volume is updated);
- it runs the fake battery as a real process from its own entry point
  (`python -m batteryop.testing.fake_battery -config=<file> -db=...`), and starts it again
  whenever it exits (restartPolicy Always). `starts` counts the processes it started, so a test
  sees how many restarts the registry made. `restart(hosts=...)` stops it and starts it again
  from a config file naming only those Hosts and a database without Host rows, as a battery
  that lost its Hosts.
- `tls_dir` holds battery's flintlockd client certificate and key and the Hosts' serving CA,
  issued by two test CAs (`serving_ca`, `client_ca`); `renew_client_certificate` replaces the
  certificate the way a renewed Secret reaches a projected volume.

`RegistryProcess` runs the registry (its pex when there is one, else `python -m`) with the
flags the Manifests give it, pointed at this pod's files and at battery's address, and waits
until `/readyz` answers 200.

`HostNode` helpers create Nodes labelled as Hosts and write their Exec Agent report (the
annotations `batteryop.exec_agent.node_report.report_annotations` writes) and their InternalIP
(the report's IP, as a kubelet reports it, unless told another: IN-108), cordon and uncordon
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from batteryop.api import names
from batteryop.api._compat import within
from batteryop.battery import BatteryClient, BatteryConfig, ReconnectPolicy, configfile
from batteryop.kube.client import KubeClient, Object, Objects
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CONFIGMAPS, EVENTS, NODES, Resource, name_selector
from batteryop.manifests import rbac
from batteryop.manifests.render import COMMON_LABELS
from batteryop.testing.controlplane import ControlPlane, admin_client, request_token
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_battery.db import Database
from batteryop.testing.processes import (
    http_get,
    module_command,
    stop_process,
    terminate,
    wait_until_answers,
)
from batteryop.tls import CertificateAuthority

PEX_IN_SANDBOX = Path("src.python.batteryop.host_registry/host-registry.pex")
FAKE_BATTERY_MODULE = "batteryop.testing.fake_battery"
READY_TIMEOUT_SECONDS = 60.0


class BatteryPodError(RuntimeError):
    """The fake battery did not start, or the file never followed the ConfigMap."""


def report(address: str, *, ready: bool = True) -> dict[str, str]:
    """The Exec Agent's Node report annotations for a Host whose flintlockd is at `address`."""
    return {
        names.EXEC_AGENT_READY_ANNOTATION: (
            names.EXEC_AGENT_READY_TRUE if ready else names.EXEC_AGENT_READY_FALSE
        ),
        names.EXEC_AGENT_REASON_ANNOTATION: "Ready" if ready else "FlintlockdUnavailable",
        names.EXEC_AGENT_MESSAGE_ANNOTATION: "" if ready else "flintlockd does not answer",
        names.EXEC_AGENT_ADDRESS_ANNOTATION: f"{address.rpartition(':')[0]}:{names.EXEC_AGENT_PORT}",
        names.FLINTLOCKD_ADDRESS_ANNOTATION: address,
    }


def _ip_of(address: str) -> str | None:
    """The IP of `host:port` (brackets dropped), or None when it names no IP."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


async def set_internal_ip(kube: KubeClient, name: str, ip: str) -> Object:
    """The Node's InternalIP, as its kubelet reports it (`status.addresses`)."""
    status = {"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}
    return await kube.patch(NODES, name, status, subresource="status")


async def create_host_node(
    kube: KubeClient,
    name: str,
    *,
    address: str | None = None,
    ready: bool = True,
    labelled: bool = True,
    extra_labels: Mapping[str, str] = {},
    internal_ip: str | None = None,
) -> Object:
    """A Node labelled as a Host (unless `labelled` is False), with a report when `address`.

    Its InternalIP is `internal_ip`, else the IP of `address` (the Host's own, as the kubelet
    and the Exec Agent report them on a real Host; IN-108); none when neither gives one."""
    labels = {**extra_labels}
    if labelled:
        labels[names.HOST_LABEL] = names.HOST_LABEL_VALUE
    meta: dict[str, Any] = {"name": name, "labels": labels}
    made = await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": meta})
    # The kubelet reports the address before the agent on that Node can report.
    ip = internal_ip or (_ip_of(address) if address is not None else None)
    if ip:
        made = await set_internal_ip(kube, name, ip)
    if address is None:
        return made
    return await kube.patch(
        NODES, name, {"metadata": {"annotations": report(address, ready=ready)}}
    )


async def set_report(kube: KubeClient, name: str, address: str, *, ready: bool = True) -> Object:
    """The agent's report naming `address`; the Node's InternalIP follows it (a real Host's
    flintlockd listens on the Node's address)."""
    ip = _ip_of(address)
    if ip:
        await set_internal_ip(kube, name, ip)
    return await kube.patch(
        NODES, name, {"metadata": {"annotations": report(address, ready=ready)}}
    )


async def set_cordoned(kube: KubeClient, name: str, cordoned: bool) -> Object:
    return await kube.patch(NODES, name, {"spec": {"unschedulable": cordoned or None}})


async def set_labelled(kube: KubeClient, name: str, labelled: bool) -> Object:
    value = names.HOST_LABEL_VALUE if labelled else None
    return await kube.patch(NODES, name, {"metadata": {"labels": {names.HOST_LABEL: value}}})


def operator_identity(cp: ControlPlane, namespace: str, kubeconfig: Path) -> Path:
    """The operator's ServiceAccount in `namespace` with install.yaml's RBAC (its cluster-wide
    objects named after the namespace, so tests do not share them), and a kubeconfig acting
    as it: the registry runs with exactly the rights the Manifests give its container."""
    from kubernetes import utils

    api = admin_client(cp)
    try:
        suffix = f"-{namespace}"
        for obj in rbac.objects(namespace=namespace, labels=COMMON_LABELS):
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                if obj["metadata"]["name"] != rbac.MANAGER_ROLE:
                    continue  # the aggregated user roles: not the operator's
                obj["metadata"]["name"] += suffix
                if obj["kind"] == "ClusterRoleBinding":
                    obj["roleRef"]["name"] += suffix
            utils.create_from_dict(api, obj)
        token = request_token(api, namespace, rbac.OPERATOR_SERVICE_ACCOUNT, seconds=3600)
    finally:
        api.close()
    return cp.write_kubeconfig(kubeconfig, token=token)


async def until_listed(
    kube: KubeClient,
    resource: Resource,
    namespace: str | None,
    check: Callable[[dict[str, Object]], bool],
    *,
    timeout: float,
    field_selector: str | None = None,
    what: str = "",
) -> dict[str, Object]:
    """The objects of `resource` in `namespace` by name, listed and then watched from the
    list's resourceVersion (so no change between the two is missed), once `check(them)` holds;
    after `timeout`, an AssertionError naming `what` and the objects last seen."""
    bodies: dict[str, Object] = {}

    async def wait() -> dict[str, Object]:
        items = await kube.list(resource, namespace, field_selector=field_selector)
        bodies.update((str(o["metadata"]["name"]), o) for o in items)
        if check(bodies):
            return bodies
        while True:
            async for kind, obj in kube.watch(
                resource,
                namespace,
                field_selector=field_selector,
                resource_version=items.resource_version or None,
            ):
                name = str(obj["metadata"]["name"])
                if kind == "DELETED":
                    bodies.pop(name, None)
                else:
                    bodies[name] = obj
                if check(bodies):
                    return bodies

    try:
        return await within(wait(), timeout)
    except TimeoutError:
        label = what or f"{resource.plural} in {namespace}"
        raise AssertionError(f"{label} never matched in {timeout}s; last seen: {bodies}") from None


async def until_configmap(
    kube: KubeClient,
    namespace: str,
    check: Callable[[Object], bool],
    *,
    timeout: float = 30.0,
    what: str = "the battery config ConfigMap",
) -> Object:
    """Wait (list, then watch) until `check(configmap)` is true; the ConfigMap then."""
    name = names.BATTERY_CONFIG_MAP
    found = await until_listed(
        kube,
        CONFIGMAPS,
        namespace,
        lambda cms: name in cms and check(cms[name]),
        timeout=timeout,
        field_selector=name_selector(name),
        what=what,
    )
    return found[name]


async def until_event(kube: KubeClient, node: str, reason: str, *, timeout: float = 30.0) -> Object:
    """Wait (list, then watch) for an Event with `reason` regarding Node `node`."""

    def matches(ev: Object) -> bool:
        return ev.get("reason") == reason and (ev.get("regarding") or {}).get("name") == node

    async def wait() -> Object:
        items = await kube.list(EVENTS, "default")
        for ev in items:
            if matches(ev):
                return ev
        while True:
            async for kind, ev in kube.watch(
                EVENTS, "default", resource_version=items.resource_version or None
            ):
                if kind == "ADDED" and matches(ev):
                    return ev

    return await within(wait(), timeout)


async def publications_since(
    kube: KubeClient, namespace: str, configmap: Object
) -> list[dict[str, str]]:
    """Every Host set published since `configmap` up to now, by a watch replaying the
    ConfigMap's changes from its resourceVersion."""
    now = await kube.get(CONFIGMAPS, names.BATTERY_CONFIG_MAP, namespace)
    seen = [published(now) or {}]
    if now["metadata"]["resourceVersion"] == configmap["metadata"]["resourceVersion"]:
        return seen
    async for _, cm in kube.watch(
        CONFIGMAPS,
        namespace,
        field_selector=name_selector(names.BATTERY_CONFIG_MAP),
        resource_version=configmap["metadata"]["resourceVersion"],
        timeout_seconds=30,
    ):
        seen.append(published(cm) or {})
        if cm["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]:
            break
    return seen


def published(configmap: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The Host set on the ConfigMap: name -> address; None while nothing is published."""
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(names.HOSTS_ANNOTATION)
    if raw is None:
        return None
    return {item["name"]: item.get("address", "") for item in json.loads(raw)}


@dataclass
class BatteryStart:
    pid: int
    target: str
    at: float


@contextlib.asynccontextmanager
async def battery_client(pod: BatteryPod) -> AsyncIterator[BatteryClient]:
    """A client of the pod's battery, as the tests read it: short deadlines, fast reconnects
    (the registry restarts battery), connected before it is handed out."""
    config = BatteryConfig(
        target=pod.battery_address,
        call_timeout=timedelta(seconds=5),
        reconnect=ReconnectPolicy(
            initial=timedelta(milliseconds=100), maximum=timedelta(seconds=1)
        ),
        keepalive_time=None,
    )
    async with BatteryClient.connect(config) as client:
        await client.wait_connected(timedelta(seconds=10))
        yield client


@dataclass
class BatteryPod:
    """The battery container's files and process (see the module docstring)."""

    kube: KubeClient
    namespace: str
    workdir: Path
    api_port: int
    host_api: bool
    serving_ca: CertificateAuthority = field(
        default_factory=lambda: CertificateAuthority.create("test flintlockd serving CA")
    )
    client_ca: CertificateAuthority = field(
        default_factory=lambda: CertificateAuthority.create("test flintlockd client CA")
    )
    starts: list[BatteryStart] = field(default_factory=list)
    configmap: Object | None = None
    _started: asyncio.Condition = field(default_factory=asyncio.Condition)
    _process: asyncio.subprocess.Process | None = None
    _stopping: bool = False
    _next_hosts: Mapping[str, str] | None = None

    @property
    def config_dir(self) -> Path:
        return self.workdir / "config"

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def tls_dir(self) -> Path:
        return self.workdir / "tls"

    @property
    def battery_address(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.returncode is None else None

    def initial_config(self) -> str:
        return configfile.render_text(
            {}, api_address=self.battery_address, tls_dir=str(self.tls_dir)
        )

    def write_tls(self) -> None:
        """battery's client certificate and key, and the serving CA, in `tls_dir`."""
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        pair = self.client_ca.issue(
            "battery",
            hosts=[names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)],
            client=True,
        )
        _replace(self.tls_dir / configfile.TLS_KEY_FILE, pair.key_pem)
        _replace(self.tls_dir / configfile.TLS_CERT_FILE, pair.cert_pem)
        _replace(self.tls_dir / configfile.SERVING_CA_FILE, self.serving_ca.cert_pem)

    def renew_client_certificate(self) -> None:
        """A new client certificate and key in the mount, as a renewed Secret arrives."""
        self.write_tls()

    def host_tls(self, name: str, address: str) -> tuple[Path, Path, Path]:
        """Serving certificate, key and client CA for a fake flintlockd at `address` (an IP)."""
        directory = self.workdir / "hosts" / name
        pair = self.serving_ca.issue(
            name,
            hosts=[address, names.spiffe_host_id(names.DEFAULT_TRUST_DOMAIN, name)],
            server=True,
        )
        cert, key = pair.write(directory, "tls")
        ca = directory / "client-ca.crt"
        ca.write_bytes(self.client_ca.cert_pem)
        return cert, key, ca

    # -- the kubelet's part ------------------------------------------------------------------

    def _on_list(self, items: Objects) -> None:
        self._sync(items[0] if items else None)

    def _on_event(self, kind: str, obj: Object) -> None:
        self._sync(None if kind == "DELETED" else obj)

    def _sync(self, cm: Object | None) -> None:
        self.configmap = cm
        text = ((cm or {}).get("data") or {}).get("config.json")
        if text is None:
            return
        try:
            if self.config_file.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        _replace(self.config_file, text.encode())

    async def _run_battery(self) -> None:
        command, env = module_command(FAKE_BATTERY_MODULE)
        argv = [
            *command,
            f"-config={self.config_file}",
            f"-db={self.workdir / 'poolmgr.db'}",
            "--exit-on-stdin-eof",
            "--sweep-interval=1s",
            "--reconcile-interval=0.2s",
        ]
        if self.host_api:
            argv.append("--host-api")
        log_path = self.workdir / "battery.log"
        while not self._stopping:
            if self._next_hosts is not None:
                self._forget_hosts(self._next_hosts)
                self._next_hosts = None
            with log_path.open("ab") as log:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                )
            self._process = process
            assert process.stdout is not None
            line = await process.stdout.readline()
            if line:
                ready = json.loads(line)
                async with self._started:
                    self.starts.append(BatteryStart(process.pid, ready["target"], time.monotonic()))
                    self._started.notify_all()
            code = await process.wait()
            if not line and not self._stopping:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise BatteryPodError(f"the fake battery exited with {code} at start:\n{tail}")

    def _forget_hosts(self, hosts: Mapping[str, str]) -> None:
        db = self.workdir / "poolmgr.db"
        if db.exists():
            Database(db).forget_hosts()
        text = configfile.render_text(
            hosts, api_address=self.battery_address, tls_dir=str(self.tls_dir)
        )
        _replace(self.config_file, text.encode())

    async def restart(
        self, *, hosts: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> BatteryStart:
        """Stop battery (SIGTERM) and wait until it has been started again; the new start.

        With `hosts`, the new process finds a database with no Host rows (its Pools, VMs and
        Leases kept) and a config file naming only `hosts`, as a battery that lost its Hosts:
        the file follows the ConfigMap again at the ConfigMap's next change."""
        process = self._process
        if process is None or process.returncode is not None:
            raise BatteryPodError("battery is not running")
        count = len(self.starts)
        self._next_hosts = hosts
        process.terminate()
        return await self.wait_starts(count + 1, timeout)

    async def wait_starts(self, count: int, timeout: float = 30.0) -> BatteryStart:
        """Wait until battery has been started `count` times in all; the latest start."""
        async with asyncio.timeout(timeout), self._started:
            await self._started.wait_for(lambda: len(self.starts) >= count)
        return self.starts[-1]

    def log(self) -> str:
        path = self.workdir / "battery.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls, kube: KubeClient, namespace: str, *, host_api: bool = False
    ) -> AsyncIterator[BatteryPod]:
        """Create the ConfigMap as install.yaml ships it, then run the pod's battery."""
        with tempfile.TemporaryDirectory(prefix="battery-pod-") as tmp:
            pod = cls(kube, namespace, Path(tmp), free_port(), host_api)
            pod.config_dir.mkdir(parents=True)
            pod.write_tls()
            await kube.create(
                CONFIGMAPS,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": names.BATTERY_CONFIG_MAP, "namespace": namespace},
                    "data": {"config.json": pod.initial_config()},
                },
                namespace,
            )
            _replace(pod.config_file, pod.initial_config().encode())
            follower = asyncio.create_task(
                list_watch(
                    kube,
                    CONFIGMAPS,
                    namespace=namespace,
                    field_selector=name_selector(names.BATTERY_CONFIG_MAP),
                    on_list=pod._on_list,
                    on_event=pod._on_event,
                )
            )
            runner = asyncio.create_task(pod._run_battery())
            first = asyncio.create_task(pod.wait_starts(1, READY_TIMEOUT_SECONDS))
            try:
                await asyncio.wait([first, runner], return_when=asyncio.FIRST_COMPLETED)
                if runner.done():
                    runner.result()  # raises why battery did not start
                    raise BatteryPodError(f"the fake battery stopped at start:\n{pod.log()}")
                first.result()
                yield pod
            finally:
                pod._stopping = True
                if pod._process is not None:
                    await stop_process(pod._process)
                for task in (follower, runner, first):
                    task.cancel()
                await asyncio.gather(follower, runner, first, return_exceptions=True)


def _replace(path: Path, data: bytes) -> None:
    """Write `path` atomically (a new file renamed over the old one), as the kubelet does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# --- the registry as a process ---------------------------------------------------------------


def registry_command() -> tuple[list[str], dict[str, str]]:
    """The registry's command and environment: the pex when there is one, else `python -m`."""
    pex = os.environ.get("BATTERYOP_HOST_REGISTRY_PEX")
    if pex:
        return [pex], dict(os.environ)
    if PEX_IN_SANDBOX.exists():
        return [sys.executable, str(PEX_IN_SANDBOX)], dict(os.environ)
    return module_command("batteryop.host_registry.main")


def registry_args(
    pod: BatteryPod,
    *,
    kubeconfig: Path,
    settle_time: str = "0s",
    restart_window: str = "0s",
    drain_timeout: str = "5s",
    host_resync_interval: str = "30s",
    health_port: int,
    metrics_port: int,
) -> list[str]:
    """The flags the Manifests give the registry, pointed at `pod`."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--namespace={pod.namespace}",
        f"--battery-address={pod.battery_address}",
        f"--battery-config-file={pod.config_file}",
        f"--battery-tls-dir={pod.tls_dir}",
        f"--battery-process-name={FAKE_BATTERY_MODULE}",
        f"--settle-time={settle_time}",
        f"--restart-window={restart_window}",
        f"--drain-timeout={drain_timeout}",
        "--restart-timeout=30s",
        f"--host-resync-interval={host_resync_interval}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--log-format=text",
        "--log-level=debug",
    ]


@dataclass
class RegistryProcess:
    popen: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    metrics_port: int

    @classmethod
    def spawn(cls, args: Sequence[str], health_port: int, metrics_port: int) -> RegistryProcess:
        """Start the registry with `args`, its output in a log file; do not wait for it."""
        command, env = registry_command()
        fd, log_name = tempfile.mkstemp(prefix="host-registry-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            popen = subprocess.Popen(
                [*command, *args], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        return cls(popen, Path(log_name), health_port, metrics_port)

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        pod: BatteryPod,
        *,
        kubeconfig: Path,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        **flags: str,
    ) -> AsyncIterator[RegistryProcess]:
        """Run the registry for `pod` until the block ends; returns once it is ready."""
        health, metrics = free_port(), free_port()
        args = registry_args(
            pod, kubeconfig=kubeconfig, health_port=health, metrics_port=metrics, **flags
        )
        proc = cls.spawn(args, health, metrics)
        try:
            await proc.wait_ready(ready_timeout)
            yield proc
        finally:
            proc.stop()
            proc.log_path.unlink(missing_ok=True)

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{port or self.health_port}{path}")

    async def wait_ready(self, timeout: float) -> None:
        await wait_until_answers(
            self.popen,
            f"http://127.0.0.1:{self.health_port}/readyz",
            timeout,
            what="the host registry",
            logs=self.logs,
        )

    def metrics(self) -> str:
        return self.get("/metrics", self.metrics_port)[1]

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        return terminate(self.popen)
