"""The CSR approver's test environment on the real control plane, for its tests and benchmark.

`Cluster` (fixture `cluster` in `batteryop/csr_approver/conftest.py`) sets up, in a fresh namespace: the Exec Agent's ServiceAccount with
RBAC to create and read CSRs (as the Manifests will give it: EA-067), the three CA Secrets in the
`kubernetes.io/tls` layout, and Nodes with InternalIP addresses. The approver runs in this
process (`running` starts it; it acts as the admin unless given other credentials) or as its pex
(`ApproverProcess`). `agent_certificates` obtains the Exec Agent's certificates by CSR, as the
agent does at start, for the tests of what they open and what they do not.

How a request gets the Exec Agent's identity and its Node: `agent_client(node)` creates a Pod of
the Exec Agent's ServiceAccount on that Node and asks TokenRequest for a token bound to the Pod.
For such a token the real API server adds the `authentication.kubernetes.io/node-name` extra
(and the CSR API records it in `spec.extra`), exactly as for the Exec Agent's projected token in
its DaemonSet Pod. This was chosen over impersonation headers because it exercises the path a
real Exec Agent takes; `KubeClient` has no impersonation support, and nothing here needs an
identity a real token cannot have (a token bound to no Pod is the "no Node" case).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from batteryop.api._compat import within
from batteryop.api.clock import Clock
from batteryop.api.conditions import CSRCondition
from batteryop.csr_approver.checks import service_account_username
from batteryop.csr_approver.config import ApproverConfig
from batteryop.csr_approver.controller import KOPF_STOP_SECONDS, Approver
from batteryop.csr_approver.metrics import ApproverMetrics
from batteryop.exec_agent.certs import AgentCertificates
from batteryop.kube.client import KubeClient, Object
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import (
    CERTIFICATE_SIGNING_REQUESTS,
    NODES,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    Resource,
)
from batteryop.manifests import csr_approver as csr_approver_manifests
from batteryop.manifests import rbac
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.processes import http_get, module_command, terminate
from batteryop.tls import CertificateAuthority

CLUSTERROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTERROLEBINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")

APPROVER_SA = "csr-approver"

APPROVER_CLUSTER_RULES: list[dict[str, Any]] = csr_approver_manifests.cluster_rules()
"""What the approver needs cluster-wide: install.yaml's rules (`batteryop.manifests.csr_approver`),
found by running it with no more."""

STOP_MARGIN_SECONDS = 10.0
"""How long past kopf's own stop bound `running` waits for the approver to end."""


def approver_namespace_rules(config: ApproverConfig) -> list[dict[str, Any]]:
    """What the approver needs in its namespace: install.yaml's rules, for `config`'s names."""
    return csr_approver_manifests.namespace_rules(
        serving_ca_secret=config.serving_ca_secret,
        client_ca_secret=config.client_ca_secret,
        exec_agent_serving_ca_secret=config.exec_agent_serving_ca_secret,
        ca_bundle_config_map=config.ca_bundle_config_map,
        address_pins_config_map=config.address_pins_config_map,
    )


TRUST_DOMAIN = "example.test"
AGENT_SA = "exec-agent"


async def until(
    kube: KubeClient,
    res: Resource,
    name: str,
    done: Callable[[Object], bool],
    what: str,
    *,
    namespace: str | None = None,
    timeout: float = 20,
) -> Object:
    """The object once `done(object)` holds, awaited on a watch (bounded by `timeout`)."""
    selector = f"metadata.name={name}"

    async def wait() -> Object:
        while True:
            items = await kube.list(res, namespace, field_selector=selector)
            if items and done(items[0]):
                return items[0]
            async for _kind, obj in kube.watch(
                res,
                namespace,
                field_selector=selector,
                resource_version=items.resource_version,
                timeout_seconds=int(timeout) + 1,
            ):
                if done(obj):
                    return obj

    try:
        return await within(wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"{res.plural} {name} never {what} within {timeout}s") from None


async def until_csr(
    kube: KubeClient, name: str, done: Callable[[Object], bool], what: str, timeout: float = 20
) -> Object:
    return await until(kube, CERTIFICATE_SIGNING_REQUESTS, name, done, what, timeout=timeout)


def condition(obj: Object, type: CSRCondition) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type:
            return dict(c)
    return None


def decided(obj: Object) -> bool:
    return any(condition(obj, t) for t in CSRCondition)


def finished(obj: Object) -> bool:
    return bool((obj.get("status") or {}).get("certificate")) or any(
        condition(obj, t) for t in (CSRCondition.DENIED, CSRCondition.FAILED)
    )


def certificate_pem(obj: Object) -> bytes:
    return base64.b64decode(obj["status"]["certificate"])


@dataclass
class Cluster:
    cp: ControlPlane
    kube: KubeClient
    namespace: str
    serving_ca: CertificateAuthority
    client_ca: CertificateAuthority
    exec_serving_ca: CertificateAuthority
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    made_csrs: list[str] = field(default_factory=list)
    made_nodes: list[str] = field(default_factory=list)

    def config(self, **overrides: Any) -> ApproverConfig:
        return ApproverConfig(
            trust_domain=TRUST_DOMAIN,
            namespace=self.namespace,
            exec_agent_service_account=AGENT_SA,
            health_probe_bind_address="0",
            metrics_bind_address="0",
            **overrides,
        )

    @property
    def agent_username(self) -> str:
        return service_account_username(self.namespace, AGENT_SA)

    def name(self, stem: str) -> str:
        return f"{stem}-{self.suffix}"

    async def node(self, stem: str, *addresses: str) -> str:
        """A Node named `<stem>-<suffix>` with these InternalIP addresses."""
        name = self.name(stem)
        await self.kube.create(NODES, {"metadata": {"name": name}})
        self.made_nodes.append(name)
        status = {"addresses": [{"type": "InternalIP", "address": a} for a in addresses]}
        await self.kube.patch(NODES, name, {"status": status}, subresource="status")
        return name

    async def pod_token(self, service_account: str, node: str | None) -> str:
        """A token of `service_account`; bound to a Pod on `node` when one is given."""
        if node is None:
            return await asyncio.to_thread(self._token, service_account, None)
        pod = await self.kube.create(
            PODS,
            {
                "metadata": {"name": f"{service_account}-{uuid.uuid4().hex[:6]}"},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "example.test/exec-agent:0"}],
                },
            },
            self.namespace,
        )
        return await asyncio.to_thread(self._token, service_account, pod)

    def _token(self, service_account: str, pod: Object | None) -> str:
        api = admin_client(self.cp)
        try:
            bound = None
            if pod is not None:
                bound = k8s.V1BoundObjectReference(
                    api_version="v1",
                    kind="Pod",
                    name=pod["metadata"]["name"],
                    uid=pod["metadata"]["uid"],
                )
            spec = k8s.V1TokenRequestSpec(
                audiences=[], expiration_seconds=3600, bound_object_ref=bound
            )
            answer = k8s.CoreV1Api(api).create_namespaced_service_account_token(
                service_account, self.namespace, k8s.AuthenticationV1TokenRequest(spec=spec)
            )
            return str(answer.status.token)
        finally:
            api.close()

    @contextlib.asynccontextmanager
    async def client_as(
        self, node: str | None, service_account: str = AGENT_SA
    ) -> AsyncIterator[KubeClient]:
        """A client holding `service_account`'s token, bound to a Pod on `node` if given."""
        await self.service_account(service_account)
        token = await self.pod_token(service_account, node)
        async with KubeClient(KubeConfig.from_dict(self.cp.kubeconfig(token=token))) as kube:
            yield kube

    async def service_account(self, name: str) -> None:
        try:
            await self.kube.create(SERVICEACCOUNTS, {"metadata": {"name": name}}, self.namespace)
        except Exception as e:  # already there
            if "AlreadyExists" not in str(e):
                raise
            return
        # EA-067's grant: create and read CSRs, nothing else.
        role = f"csr-requester-{self.namespace}-{name}"
        await self.kube.create(
            CLUSTERROLES,
            {
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": [CERTIFICATE_SIGNING_REQUESTS.group],
                        "resources": [CERTIFICATE_SIGNING_REQUESTS.plural],
                        "verbs": ["create", "get"],
                    }
                ],
            },
        )
        await self.kube.create(
            CLUSTERROLEBINDINGS,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": CLUSTERROLES.group, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
            },
        )
        # The agent's namespaced grant from the Manifests: the CA bundle ConfigMap, by name.
        await self.kube.create(
            ROLES,
            {"metadata": {"name": role}, "rules": rbac.exec_agent_namespace_rules()},
            self.namespace,
        )
        await self.kube.create(
            ROLEBINDINGS,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": ROLES.group, "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
            },
            self.namespace,
        )

    async def approver_credentials(
        self, cluster_rules: list[dict[str, Any]] | None = None
    ) -> KubeConfig:
        """A token of the approver's own ServiceAccount, granted `APPROVER_CLUSTER_RULES`
        (or `cluster_rules`) and `approver_namespace_rules`, and nothing else."""
        ns, sa = self.namespace, APPROVER_SA
        await self.kube.create(SERVICEACCOUNTS, {"metadata": {"name": sa}}, ns)
        subjects = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
        role = f"csr-approver-{ns}"
        rules = APPROVER_CLUSTER_RULES if cluster_rules is None else cluster_rules
        await self.kube.create(CLUSTERROLES, {"metadata": {"name": role}, "rules": rules})
        await self.kube.create(
            CLUSTERROLEBINDINGS,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": CLUSTERROLES.group, "kind": "ClusterRole", "name": role},
                "subjects": subjects,
            },
        )
        await self.kube.create(
            ROLES,
            {"metadata": {"name": role}, "rules": approver_namespace_rules(self.config())},
            ns,
        )
        await self.kube.create(
            ROLEBINDINGS,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": ROLES.group, "kind": "Role", "name": role},
                "subjects": subjects,
            },
            ns,
        )
        token = await asyncio.to_thread(self._token, sa, None)
        return KubeConfig.from_dict(self.cp.kubeconfig(token=token))

    async def create_csr(self, client: KubeClient, body: dict[str, Any]) -> str:
        created = await client.create(CERTIFICATE_SIGNING_REQUESTS, body)
        name = str(created["metadata"]["name"])
        self.made_csrs.append(name)
        return name

    async def set_condition(self, name: str, type: CSRCondition, reason: str) -> Object:
        """Approve or deny as someone else (the admin) would, through `/approval`."""
        obj = await self.kube.get(CERTIFICATE_SIGNING_REQUESTS, name)
        obj.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": str(type), "status": "True", "reason": reason, "message": "by hand"}
        )
        return await self.kube.replace(
            CERTIFICATE_SIGNING_REQUESTS, name, obj, subresource="approval"
        )

    async def cleanup(self) -> None:
        for name in self.made_csrs:
            with contextlib.suppress(Exception):
                await self.kube.delete(CERTIFICATE_SIGNING_REQUESTS, name)
        for name in self.made_nodes:
            with contextlib.suppress(Exception):
                await self.kube.delete(NODES, name)


def tls_secret(name: str, ca: CertificateAuthority) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(ca.cert_pem).decode(),
            "tls.key": base64.b64encode(ca.pair.key_pem).decode(),
        },
    }


async def make_cluster(controlplane: ControlPlane, kube: KubeClient, namespace: str) -> Cluster:
    """The Exec Agent's ServiceAccount and the three CA Secrets in `namespace`."""
    c = Cluster(
        controlplane,
        kube,
        namespace,
        CertificateAuthority.create("serving-ca", validity=datetime.timedelta(days=30)),
        CertificateAuthority.create("client-ca", validity=datetime.timedelta(days=30)),
        CertificateAuthority.create("exec-agent-serving-ca", validity=datetime.timedelta(days=30)),
    )
    config = c.config()
    await kube.create(SECRETS, tls_secret(config.serving_ca_secret, c.serving_ca), namespace)
    await kube.create(SECRETS, tls_secret(config.client_ca_secret, c.client_ca), namespace)
    await kube.create(
        SECRETS,
        tls_secret(config.exec_agent_serving_ca_secret, c.exec_serving_ca),
        namespace,
    )
    await c.service_account(AGENT_SA)
    return c


@contextlib.asynccontextmanager
async def running(
    c: Cluster,
    config: ApproverConfig | None = None,
    *,
    credentials: KubeConfig | None = None,
    clock: Clock | None = None,
    metrics: ApproverMetrics | None = None,
) -> AsyncIterator[Approver]:
    """The approver, in this process, until the block ends; the admin's credentials unless
    `credentials` are given; its time (signing, pin expiry) from `clock` when given."""
    async with KubeClient(credentials or KubeConfig.from_dict(c.cp.kubeconfig())) as kube:
        if clock is None:
            approver = Approver(config or c.config(), kube, metrics=metrics)
        else:
            approver = Approver(config or c.config(), kube, metrics=metrics, clock=clock)
        stop = asyncio.Event()
        task = asyncio.create_task(approver.run(stop))
        try:
            yield approver
        finally:
            stop.set()
            # The approver gives kopf up to KOPF_STOP_SECONDS to wind down, then stops its other
            # tasks: a bound no longer than that one failed under load (CI, 2026-12-06).
            await within(task, KOPF_STOP_SECONDS + STOP_MARGIN_SECONDS)


def new_agent_certificates(
    c: Cluster, kube: KubeClient, node: str, address: str, cert_dir: Path, **options: Any
) -> AgentCertificates:
    """The Exec Agent's certificates on `node` in `c`'s namespace and trust domain, not started,
    requested through `kube`; `options` as AgentCertificates takes them."""
    return AgentCertificates(
        kube,
        node=node,
        trust_domain=TRUST_DOMAIN,
        address=address,
        namespace=c.namespace,
        cert_dir=cert_dir,
        **options,
    )


@contextlib.asynccontextmanager
async def agent_certificates(
    c: Cluster, node: str, address: str, cert_dir: Path
) -> AsyncIterator[AgentCertificates]:
    """The Exec Agent's certificates on `node` (its address `address`, flintlockd's files in
    `cert_dir`), obtained by CSR as the agent's own identity on that Node, as the agent does at
    start; the approver must be running. Closed when the block ends."""
    async with c.client_as(node) as kube:
        agent = new_agent_certificates(c, kube, node, address, cert_dir)
        try:
            await within(agent.start(), 60)
            yield agent
        finally:
            await agent.aclose()


# -- the approver as its own process ------------------------------------------------------------

PEX_IN_SANDBOX = Path("src.python.batteryop.csr_approver/csr-approver.pex")


def approver_command() -> tuple[list[str], dict[str, str]]:
    """The command that runs the approver: $BATTERYOP_CSR_APPROVER_PEX, the pex Pants put in
    the sandbox (`runtime_package_dependencies`), else `python -m` from the sources."""
    pex = os.environ.get("BATTERYOP_CSR_APPROVER_PEX")
    if pex:
        return [pex], dict(os.environ)
    if PEX_IN_SANDBOX.exists():
        return [sys.executable, str(PEX_IN_SANDBOX)], dict(os.environ)
    return module_command("batteryop.csr_approver.main")


@dataclass
class ApproverProcess:
    """The approver's process, its log, and its health and metrics ports.

    Nothing waits for it to come up by polling: callers await what it does (a request signed,
    on a watch); the probes are read once it has shown it works.
    """

    popen: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    metrics_port: int

    @classmethod
    @contextlib.contextmanager
    def start(cls, args: Sequence[str]) -> Iterator[ApproverProcess]:
        health, metrics = free_port(), free_port()
        fd, log_name = tempfile.mkstemp(prefix="csr-approver-", suffix=".log")
        command, env = approver_command()
        argv = [
            *command,
            f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            *args,
        ]
        with os.fdopen(fd, "wb") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        proc = cls(popen, Path(log_name), health, metrics)
        try:
            yield proc
        finally:
            proc.stop()
            proc.log_path.unlink(missing_ok=True)

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{port or self.health_port}{path}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 15 s; the exit code."""
        return terminate(self.popen)
