"""A running Exec Agent for tests and benchmarks, with everything around it real but MicroVMs.

- `prepare_cluster(cp)`: the CRDs, and the agent's own ServiceAccount holding exactly the rules
  the Manifests give it (`rbac.exec_agent_cluster_rules`, `rbac.exec_agent_namespace_rules` in
  `AGENT_NAMESPACE`, where its drain guard goes); `agent_kube_config(cp)` acts as it.
- `make_pki(dir)`: flintlockd's serving CA and client CA, flintlockd's serving certificate for
  `FLINTLOCKD_ADDRESS`, the agent's client certificate and its serving certificate.
- `running_agent(...)`: the agent as a real grpc.aio server with TLS on `AGENT_ADDRESS` (port 0),
  in this process, acting as its ServiceAccount; the phases it timed land in `Agent.phases`,
  its refusals (check, code) in `Agent.refusals`.
- `Holders`: a Holder's world as a Consumer and the operator make it: a ServiceAccount, the
  claim's `<claim>-exec` Secret, the claim with a Bound status naming a MicroVM created on the
  (fake) flintlockd, and a TokenRequest token bound to the Secret for the agent's audience.
- `run_exec`, `requests_of`, `joined`: calling the agent as a client would.

The fake flintlockd runs with `FakeFlintlockd.start(address=FLINTLOCKD_ADDRESS,
tls=pki.flintlockd_tls, ssh_proxy=True)`: mutual TLS, the agent's client certificate the only way
in, with `MicroVMSSHProxy` served beside `MicroVMExec` (each sandbox MicroVM's sshd starts on its
first SSH stream: `fake_flintlock.sshd`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import (
    microvmexec_pb2,
    microvmexec_pb2_grpc,
)
from batteryop.api import names, samples
from batteryop.api.claim import ClaimStatus
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.conditions import ClaimPhase
from batteryop.api.crds import all_crds
from batteryop.exec_agent.auth import Authorizer
from batteryop.exec_agent.config import AgentConfig
from batteryop.exec_agent.errors import Check
from batteryop.exec_agent.flintlockd import Flintlockd
from batteryop.exec_agent.host_checks import HostPaths
from batteryop.exec_agent.server import AgentServer, failed_auth_limiter, identity_limiter
from batteryop.exec_agent.timing import Phase
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.manifests import rbac
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    ensure_service_account,
    install_crd,
    pod_bound_token,
    request_token,
)
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_flintlock import FakeFlintlockd, TLSFiles
from batteryop.testing.fake_flintlock.testkit import make_spec
from batteryop.testing.processes import module_command
from batteryop.tls import CertificateAuthority

NODE = "host-a"
"""The agent's Host."""
OTHER_NODE = "host-b"
FLINTLOCKD_ADDRESS = "127.0.0.41"
AGENT_ADDRESS = "127.0.0.42"
AGENT_NAMESPACE = "exec-agent-tests"
AGENT_ROLE = "exec-agent-tests"

Request = microvmexec_pb2.ExecCommandRequest
Response = microvmexec_pb2.ExecCommandResponse


@dataclass(frozen=True)
class Pki:
    serving_ca: CertificateAuthority
    """Signs flintlockd's serving certificate."""
    client_ca: CertificateAuthority
    exec_serving_ca: CertificateAuthority
    """Signs the agent's exec API serving certificate, and nothing else (CT-101): what a
    Holder's client trusts."""
    flintlockd_tls: TLSFiles
    files: dict[str, Path]
    """AgentConfig field name -> file."""


def make_pki(directory: Path) -> Pki:
    """Every certificate the agent and the fake flintlockd need, written under `directory`."""
    serving_ca = CertificateAuthority.create("flintlockd-serving-ca")
    client_ca = CertificateAuthority.create("flintlockd-client-ca")
    exec_serving_ca = CertificateAuthority.create("exec-agent-serving-ca")
    d = directory
    flintlockd = serving_ca.issue(
        NODE,
        hosts=[FLINTLOCKD_ADDRESS, names.spiffe_host_id(names.DEFAULT_TRUST_DOMAIN, NODE)],
        server=True,
    )
    fl_cert, fl_key = flintlockd.write(d, "flintlockd")
    client_ca_file = d / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    serving_ca_file = d / "serving-ca.crt"
    serving_ca_file.write_bytes(serving_ca.cert_pem)
    (d / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY).write_bytes(exec_serving_ca.cert_pem)
    agent_id = names.spiffe_exec_agent_id(names.DEFAULT_TRUST_DOMAIN, NODE)
    client_cert, client_key = client_ca.issue(NODE, hosts=[agent_id], client=True).write(
        d, "agent-client"
    )
    serving_cert, serving_key = exec_serving_ca.issue(
        NODE, hosts=[AGENT_ADDRESS, agent_id], server=True
    ).write(d, "agent-serving")
    return Pki(
        serving_ca=serving_ca,
        client_ca=client_ca,
        exec_serving_ca=exec_serving_ca,
        flintlockd_tls=TLSFiles(cert=fl_cert, key=fl_key, client_ca=client_ca_file),
        files={
            "tls_cert_file": serving_cert,
            "tls_key_file": serving_key,
            "flintlockd_ca_file": serving_ca_file,
            "flintlockd_cert_file": client_cert,
            "flintlockd_key_file": client_key,
        },
    )


def prepare_cluster(controlplane: ControlPlane) -> ControlPlane:
    """The control plane with the CRDs and the agent's ServiceAccount and ClusterRole."""
    api = admin_client(controlplane)
    try:
        for crd in all_crds():
            install_crd(api, crd)
        core = k8s.CoreV1Api(api)
        with contextlib.suppress(k8s.ApiException):
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=AGENT_NAMESPACE)))
        ensure_service_account(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME)
        # Pods (the drain guard) run as `default`, which kube-controller-manager would make.
        ensure_service_account(api, AGENT_NAMESPACE, "default")
        authz = k8s.RbacAuthorizationV1Api(api)
        with contextlib.suppress(k8s.ApiException):
            authz.create_cluster_role(
                {"metadata": {"name": AGENT_ROLE}, "rules": rbac.exec_agent_cluster_rules()}
            )
        with contextlib.suppress(k8s.ApiException):
            authz.create_cluster_role_binding(
                {
                    "metadata": {"name": AGENT_ROLE},
                    "roleRef": {
                        "apiGroup": rbac.RBAC_GROUP,
                        "kind": "ClusterRole",
                        "name": AGENT_ROLE,
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": names.EXEC_AGENT_NAME,
                            "namespace": AGENT_NAMESPACE,
                        }
                    ],
                }
            )
        # The namespaced grant: the CA bundle ConfigMap, by name (certificates by CSR).
        subject = {"kind": "ServiceAccount", "name": names.EXEC_AGENT_NAME}
        with contextlib.suppress(k8s.ApiException):
            authz.create_namespaced_role(
                AGENT_NAMESPACE,
                {"metadata": {"name": AGENT_ROLE}, "rules": rbac.exec_agent_namespace_rules()},
            )
        with contextlib.suppress(k8s.ApiException):
            authz.create_namespaced_role_binding(
                AGENT_NAMESPACE,
                {
                    "metadata": {"name": AGENT_ROLE},
                    "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "Role", "name": AGENT_ROLE},
                    "subjects": [{**subject, "namespace": AGENT_NAMESPACE}],
                },
            )
    finally:
        api.close()
    return controlplane


def agent_kube_config(cluster: ControlPlane) -> KubeConfig:
    """The agent's own identity: its ServiceAccount's token, its RBAC only."""
    api = admin_client(cluster)
    try:
        token = request_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME)
    finally:
        api.close()
    return KubeConfig.from_dict(cluster.kubeconfig(token=token))


@dataclass
class PhaseLog:
    """A `PhaseObserver` and `RefusalObserver` keeping every observation, in order."""

    phases: list[tuple[Phase, float]] = field(default_factory=list)
    refusals: list[tuple[Check, grpc.StatusCode]] = field(default_factory=list)

    def observe_phase(self, phase: Phase, seconds: float) -> None:
        self.phases.append((phase, seconds))

    def observe_refusal(self, check: Check, code: grpc.StatusCode) -> None:
        self.refusals.append((check, code))


@dataclass
class Agent:
    """The running agent, and a way to call it as a client would."""

    config: AgentConfig
    server: AgentServer
    pki: Pki
    phases: list[tuple[Phase, float]]
    """What the agent timed, call after call (`timing.Phase`, seconds)."""
    refusals: list[tuple[Check, grpc.StatusCode]] = field(default_factory=list)
    """What the agent refused (and which running streams it ended), call after call."""

    @contextlib.asynccontextmanager
    async def channel(self, **options: Any) -> AsyncIterator[grpc.aio.Channel]:
        """A TLS channel verifying the agent's serving certificate, as a Holder's client has."""
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.pki.exec_serving_ca.cert_pem
        )
        opts = [("grpc.max_send_message_length", 64 * 1024 * 1024), *options.items()]
        async with grpc.aio.secure_channel(self.server.target, credentials, options=opts) as ch:
            yield ch


def agent_config(pki: Pki, flintlockd_target: str, **overrides: Any) -> AgentConfig:
    values: dict[str, Any] = {
        "node_name": NODE,
        "address": AGENT_ADDRESS,
        "port": 0,
        "flintlockd": flintlockd_target,
        **pki.files,
        "call_timeout": timedelta(seconds=5),
        "exec_open_timeout": timedelta(seconds=5),
        **overrides,
    }
    return AgentConfig(**values)


@contextlib.asynccontextmanager
async def running_agent(
    pki: Pki,
    kube_config: KubeConfig,
    flintlockd_target: str,
    *,
    clock: Clock = SYSTEM_CLOCK,
    **overrides: Any,
) -> AsyncIterator[Agent]:
    """An Exec Agent in this process; `clock` judges leases and tokens (`Authorizer`)."""
    config = agent_config(pki, flintlockd_target, **overrides)
    log = PhaseLog()
    async with (
        KubeClient(kube_config, timeout=config.call_timeout.total_seconds()) as kube,
        Flintlockd.connect(config) as upstream,
    ):
        authorizer = Authorizer(
            kube,
            node_name=config.node_name,
            audience=config.token_audience,
            clock=clock,
            observer=log,
            limiter=failed_auth_limiter(config),
            identities=identity_limiter(config),
        )
        server = AgentServer(
            config, authorizer=authorizer, flintlockd=upstream, observer=log, refusals=log
        )
        await server.start()
        try:
            yield Agent(
                config=config, server=server, pki=pki, phases=log.phases, refusals=log.refusals
            )
        finally:
            await server.stop()


# --- Holders: claims, their Secrets, tokens ----------------------------------------------------


@dataclass
class Holding:
    """One Holder's claim as the agent will see it."""

    namespace: str
    claim: str
    service_account: str
    microvm_uid: str
    secret_uid: str
    token: str = field(repr=False)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


@dataclass
class Holders:
    """Makes Holdings in one namespace (see the module docstring)."""

    api: k8s.ApiClient
    namespace: str
    flintlockd: FakeFlintlockd
    pki: Pki

    async def create_microvm(self, name: str) -> str:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.pki.serving_ca.cert_pem,
            private_key=self.pki.files["flintlockd_key_file"].read_bytes(),
            certificate_chain=self.pki.files["flintlockd_cert_file"].read_bytes(),
        )
        async with grpc.aio.secure_channel(self.flintlockd.target, credentials) as channel:
            request = microvms_pb2.CreateMicroVMRequest(microvm=make_spec(name, self.namespace))
            answer = await microvms_pb2_grpc.MicroVMStub(channel).CreateMicroVM(request, timeout=10)
        return str(answer.microvm.spec.uid)

    def create_secret(self, claim: str) -> str:
        secret = k8s.CoreV1Api(self.api).create_namespaced_secret(
            self.namespace,
            k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=names.exec_secret_name(claim))),
        )
        return str(secret.metadata.uid)

    def token(
        self,
        service_account: str,
        secret: tuple[str, str] | None,
        *,
        audience: str = names.EXEC_AGENT_AUDIENCE,
    ) -> str:
        return request_token(
            self.api,
            self.namespace,
            service_account,
            audiences=[audience],
            seconds=600,
            bound_secret=secret,
        )

    def write_claim(
        self,
        claim: str,
        service_account: str,
        *,
        phase: ClaimPhase | None = ClaimPhase.BOUND,
        microvm_uid: str | None = None,
        node: str | None = NODE,
        expires_in: timedelta | None = timedelta(hours=1),
        bound_ago: timedelta = timedelta(0),
    ) -> None:
        custom = k8s.CustomObjectsApi(self.api)
        body = samples.sample_claim(claim, "pool", service_account, self.namespace)
        custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, names.CLAIM_PLURAL, body
        )
        now = datetime.now(UTC).replace(microsecond=0)
        bound = phase == ClaimPhase.BOUND
        status = ClaimStatus(
            phase=phase,
            lease_id=f"lease-{claim}" if bound else None,
            microvm_uid=microvm_uid,
            node_name=node,
            bound_time=now - bound_ago if bound else None,
            lease_expires_at=now + expires_in if bound and expires_in is not None else None,
        )
        custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            self.namespace,
            names.CLAIM_PLURAL,
            claim,
            {"status": status.to_dict()},
        )

    async def hold(
        self,
        claim: str | None = None,
        *,
        service_account: str = "sandbox",
        phase: ClaimPhase | None = ClaimPhase.BOUND,
        node: str | None = NODE,
        expires_in: timedelta | None = timedelta(hours=1),
        bound_ago: timedelta = timedelta(0),
    ) -> Holding:
        """A Holder with a claim in `phase` on `node`, its Secret, and a bound token.

        `expires_in` None: a Bound claim whose lease expiry the operator has not written yet;
        `bound_ago`: how long before now (in whole seconds, as written) it was bound."""
        claim = claim or f"claim-{uuid.uuid4().hex[:8]}"
        ensure_service_account(self.api, self.namespace, service_account)
        uid = await self.create_microvm(claim)
        secret_uid = self.create_secret(claim)
        self.write_claim(
            claim,
            service_account,
            phase=phase,
            microvm_uid=uid,
            node=node,
            expires_in=expires_in,
            bound_ago=bound_ago,
        )
        token = self.token(service_account, (names.exec_secret_name(claim), secret_uid))
        return Holding(self.namespace, claim, service_account, uid, secret_uid, token)


# --- a made-up Host for the Host checks ------------------------------------------------------


def healthy_host(root: Path) -> HostPaths:
    """Host paths under `root` that pass every file check: KVM in sysfs, a character device
    (/dev/null, which every machine has), the thin pool among the device-mapper devices, and an
    empty not-ready directory."""
    (root / "sys/class/misc/kvm").mkdir(parents=True)
    (root / "sys/class/misc/kvm/dev").write_text("10:232\n")
    (root / "sys/block/dm-0/dm").mkdir(parents=True)
    (root / "sys/block/dm-0/dm/name").write_text("other\n")
    (root / "sys/block/dm-3/dm").mkdir(parents=True)
    (root / "sys/block/dm-3/dm/name").write_text("flintlock-thinpool\n")
    (root / "not-ready.d").mkdir()
    return HostPaths(
        not_ready_dir=root / "not-ready.d",
        kvm_device=Path("/dev/null"),
        kvm_sysfs_dir=root / "sys/class/misc/kvm",
        thin_pool="flintlock-thinpool",
        sys_block_dir=root / "sys/block",
    )


def agent_process_args(
    cluster: ControlPlane, pki: Pki, flintlockd_target: str, root: Path
) -> tuple[list[str], int]:
    """The flags of an Exec Agent process on NODE, as its DaemonSet passes them, and the port
    it will listen on (AGENT_ADDRESS): a kubeconfig with a Pod-bound token (the Node made if
    missing), the PKI's files, a healthy Host under `root`, the drain guard in AGENT_NAMESPACE,
    JSON logs."""
    api = admin_client(cluster)
    try:
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(api).create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=NODE)))
        token = pod_bound_token(api, AGENT_NAMESPACE, names.EXEC_AGENT_NAME, NODE)
    finally:
        api.close()
    kubeconfig = cluster.write_kubeconfig(root / "agent.kubeconfig", token=token)
    host = healthy_host(root / "host")
    port = free_port(AGENT_ADDRESS)
    argv = [
        f"--host-node={NODE}",
        f"--address={AGENT_ADDRESS}",
        f"--port={port}",
        f"--flintlockd={flintlockd_target}",
        *(f"--{key.replace('_', '-')}={path}" for key, path in pki.files.items()),
        f"--kubeconfig={kubeconfig}",
        f"--not-ready-dir={host.not_ready_dir}",
        f"--kvm-device={host.kvm_device}",
        f"--kvm-sysfs-dir={host.kvm_sysfs_dir}",
        f"--sys-block-dir={host.sys_block_dir}",
        f"--guard-namespace={AGENT_NAMESPACE}",
        "--log-format=json",
    ]
    return argv, port


# --- calling the agent ---------------------------------------------------------------------------


async def requests_of(
    start: microvmexec_pb2.ExecStart | None, stdin: Sequence[bytes] = (), *, eof: bool = True
) -> AsyncIterator[Request]:
    if start is not None:
        yield Request(start=start)
    for chunk in stdin:
        yield Request(stdin=chunk)
    if eof and stdin:
        yield Request(stdin_eof=True)


async def run_exec(
    channel: grpc.aio.Channel,
    metadata: Sequence[tuple[str, str]],
    start: microvmexec_pb2.ExecStart,
    stdin: Sequence[bytes] = (),
) -> list[Response]:
    """Every response of one exec stream through the agent; raises the RPC error if it fails.

    The requests are written here, not from an iterator grpc consumes: an agent that refuses at
    once may end the call while a request is still being sent, and grpc then reports that send
    as INTERNAL instead of the agent's own status, which reading the call gives."""
    stub = microvmexec_pb2_grpc.MicroVMExecStub(channel)
    call = stub.ExecCommand(metadata=metadata, timeout=30)
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
        async for request in requests_of(start, stdin):
            await call.write(request)
        await call.done_writing()
    return [response async for response in call]


FLOOD_SOURCE: Final = "127.0.0.43"
"""The flood's own source address (`batteryop.testing.exec_agent_flood`): its own bucket."""


@dataclass
class FloodRun:
    """A flood of bad-token calls at the agent while one Holder ran `true` again and again."""

    flood: dict[str, Any]
    """The flood process's report: calls, seconds, codes."""
    seconds: float
    """From the flood's start to its end, as this process saw it."""
    latencies: list[float]
    """The Holder's round trips meanwhile (seconds, in order); every one exited 0."""
    during: int
    """How many of them ended while the flood ran."""
    reviews: int
    """TokenReviews the flood cost the API server (the Holder's own taken out)."""
    reads: int
    """Claim reads the flood cost it."""
    rss_before: int
    rss_peak: int
    """This process's resident memory (the agent runs in it) before and at most meanwhile."""
    unloaded: list[float] = field(default_factory=list)
    """The Holder's round trips just before the flood (`baseline` of them), seconds."""
    phases_from: int = 0
    """Where the flood's part of `Agent.phases` starts (the Holder's calls are in it too)."""


HOLDER_RATE_SHARE: Final = 0.8
"""The share of its identity's call rate the flood's Holder uses (`flood_while_holding`)."""


class _Pace:
    """Turns at most `rate` a second, on average from the first: a caller past its schedule
    goes on at once, one ahead of it waits for its turn."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next: float | None = None

    async def turn(self) -> None:
        now = time.monotonic()
        if self._next is None or self._next < now:
            self._next = now
        elif self._next > now:
            await asyncio.sleep(self._next - now)  # a rate to keep, not a wait for an event
        self._next += self._interval


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


async def flood_while_holding(
    agent: Agent,
    holding: Holding,
    *,
    calls: int,
    connections: int,
    at_least: int = 100,
    token: str | None = None,
    baseline: int = 0,
) -> FloodRun:
    """`calls` bad-token calls over `connections` connections from FLOOD_SOURCE (a process of
    its own) while `holding`'s Holder runs `true` through the agent, at least `at_least` times.
    With `token`, the flood is one identity's instead: every call carries that valid token
    (`exec_agent_flood --token-file`). With `baseline`, that many of the Holder's round trips
    are timed before the flood starts (`FloodRun.unloaded`).

    The Holder keeps under its own identity's bucket (EA-120: `identity_call_rate`), as a Holder
    that is not to be refused must: unpaced, an idle machine ran `true` faster than the 100 calls
    a second it gets back and the agent rightly refused it (CI, 2026-12-06).

    limits_test checks what it must not cost (EA-105, EA-107); exec_agent_bench prints the
    Holder's latency meanwhile, a machine's figure rather than a test's."""
    start = microvmexec_pb2.ExecStart(uid=holding.microvm_uid, cmd="true")
    pace = _Pace(HOLDER_RATE_SHARE * agent.config.identity_call_rate)

    def count(phase: Phase) -> int:
        return sum(1 for p, _ in agent.phases if p == phase)

    latencies: list[float] = []
    async with agent.channel() as channel:
        for _ in range(20):  # warm: connection, flintlockd channel, the agent's code paths
            await pace.turn()
            await run_exec(channel, holding.metadata, start)
        unloaded: list[float] = []
        for _ in range(baseline):
            await pace.turn()
            t0 = time.perf_counter()
            await run_exec(channel, holding.metadata, start)
            unloaded.append(time.perf_counter() - t0)
        rss_before = rss_peak = _rss_bytes()
        phases_from = len(agent.phases)
        reviews_before, reads_before = count(Phase.TOKEN_REVIEW), count(Phase.CLAIM_READ)
        argv, env = module_command("batteryop.testing.exec_agent_flood")
        ca = Path(agent.config.tls_cert_file).parent / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY
        if token is not None:
            token_file = ca.parent / "flood-token"
            token_file.write_text(token)
            argv = [*argv, f"--token-file={token_file}"]
        began = time.monotonic()
        flood = await asyncio.create_subprocess_exec(
            *argv,
            f"--target={agent.server.target}",
            f"--ca={ca}",
            f"--source={FLOOD_SOURCE}",
            f"--calls={calls}",
            f"--connections={connections}",
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        done = asyncio.ensure_future(flood.communicate())
        during = 0
        while not done.done() or len(latencies) < at_least:
            await pace.turn()
            t0 = time.perf_counter()
            responses = await run_exec(channel, holding.metadata, start)
            latencies.append(time.perf_counter() - t0)
            if responses[-1].exit_code != 0:
                raise AssertionError(f"the Holder's `true` ended {responses[-1]}")
            if not done.done():
                during += 1
            rss_peak = max(rss_peak, _rss_bytes())
        out, _ = await done
        seconds = time.monotonic() - began
    if flood.returncode != 0:
        raise AssertionError(f"the flood process exited {flood.returncode}")
    holder = len(latencies)
    return FloodRun(
        flood=json.loads(out),
        seconds=seconds,
        latencies=latencies,
        during=during,
        reviews=count(Phase.TOKEN_REVIEW) - reviews_before - holder,
        reads=count(Phase.CLAIM_READ) - reads_before - holder,
        rss_before=rss_before,
        rss_peak=rss_peak,
        unloaded=unloaded,
        phases_from=phases_from,
    )


async def drain(
    call: AsyncIterable[Any], into: list[Any] | None = None, on: Callable[[Any], None] | None = None
) -> list[Any]:
    """Every message of a response stream (appended to `into` as they come, each shown to `on`),
    until it ends; raises the RPC error if it fails."""
    got = [] if into is None else into
    async for message in call:
        got.append(message)
        if on is not None:
            on(message)
    return got


def joined(responses: Sequence[Response], kind: str) -> bytes:
    return b"".join(getattr(r, kind) for r in responses if r.WhichOneof("payload") == kind)
