"""The local stack: everything around the operator, on one machine, on loopback.

Used by the integration tests (in-process fakes, the operator as a process); the README's main
job and the end-to-end tests run `batteryop.devstack` instead, every component a process:

- the real control plane with both CRDs, the finalizer policy, the operator's namespace, its
  ServiceAccount and the least-privilege RBAC exactly as `install.yaml` has them
  (`prepare_cluster`);
- one Node per simulated Host, labelled as a Host, and the Host set published on the battery
  config ConfigMap by hand, as the host registry publishes it (`publish_hosts_by_hand`). This
  is the integration harness's one shortcut, kept on purpose: its battery is a `FakeBattery`
  in the test's own process, started afresh on new ports for every test while the Nodes and
  the ConfigMap are shared by the whole session. A registry per test would add a process
  start (seconds on a loaded machine) to every one of these tests, and the next operator would
  read the Host set the previous test's registry left until the new one replaced it. The
  registry's publication is tested end to end where it runs for real: the local stack
  (`batteryop.devstack`, `tests/e2e`, battery with `AddHost`) and
  `tests/integration/host_registry_test.py` (battery restarted by the registry);
- a fake flintlockd process per Host, each on its own loopback address;
- the fake battery (poolmgrd v0.4.0 semantics) over those Hosts;
- the operator as a real process, authenticated as its ServiceAccount (`LocalStack.start`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import utils

from batteryop.api import crds, names, samples
from batteryop.manifests import admission, rbac
from batteryop.manifests.render import COMMON_LABELS
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    install_crd,
    request_token,
)
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.fake_flintlock import FakeFlintlockd
from batteryop.testing.operator_runner import OperatorProcess

HOSTS: Mapping[str, str] = {"host-a": "127.0.0.21", "host-b": "127.0.0.22"}
"""Simulated Hosts: Node name -> the loopback address its fake flintlockd listens on."""

HOST_NODE_LABELS: Mapping[str, str] = {
    names.HOST_LABEL: names.HOST_LABEL_VALUE,
    "kubernetes.io/arch": "amd64",
}


def finalizer_policy_active(api: k8s.ApiClient, namespace: str = names.OPERATOR_NAMESPACE) -> bool:
    """Whether the API server applies the finalizer policy now (a dry-run claim create).

    Right after a CRD is installed, the policy's admission step can answer 503 ("kind not
    found") until the API server's type information catches up; that counts as not yet.
    """
    try:
        answer = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.CLAIM_PLURAL,
            samples.sample_claim(name="finalizer-policy-probe", pool="probe", namespace=namespace),
            dry_run="All",
        )
    except k8s.ApiException as e:
        if e.status == 503:
            return False
        raise
    return names.CLAIM_FINALIZER in (answer["metadata"].get("finalizers") or [])


def wait_finalizer_policy(api: k8s.ApiClient, active: bool, timeout: float = 30.0) -> None:
    """Wait until the API server has loaded (or dropped) the finalizer policy."""
    started = time.monotonic()
    deadline = started + timeout
    while finalizer_policy_active(api) != active:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the finalizer policy never became {'active' if active else 'inactive'}"
            )
        time.sleep(0.1)


def install_finalizer_policy(api: k8s.ApiClient) -> None:
    """The MutatingAdmissionPolicy and binding of install.yaml; returns once it applies."""
    custom = k8s.CustomObjectsApi(api)
    for obj in admission.finalizer_policy_objects(COMMON_LABELS):
        try:
            custom.create_cluster_custom_object(
                admission.GROUP, admission.VERSION, admission.PLURALS[obj["kind"]], obj
            )
        except k8s.ApiException as e:
            if e.status != 409:
                raise
    wait_finalizer_policy(api, active=True)


def publish_hosts_by_hand(core: k8s.CoreV1Api, hosts: Mapping[str, str]) -> None:
    """The battery config ConfigMap with `hosts` published on it, as the host registry
    publishes them, for this stack, which runs no host registry (see the module docstring).
    The registry's own tests, `tests/integration/host_registry_test.py` and the local stack
    (`batteryop.devstack`, `tests/e2e`) publish through the registry."""
    with contextlib.suppress(k8s.ApiException):
        core.create_namespaced_config_map(
            names.OPERATOR_NAMESPACE,
            k8s.V1ConfigMap(
                metadata=k8s.V1ObjectMeta(
                    name=names.BATTERY_CONFIG_MAP,
                    annotations={
                        names.HOSTS_ANNOTATION: json.dumps(
                            [{"name": n, "address": hosts[n]} for n in sorted(hosts)]
                        )
                    },
                )
            ),
        )


def prepare_cluster(
    cp: ControlPlane, hosts: Mapping[str, str] = HOSTS, *, publish_hosts: bool = True
) -> None:
    """CRDs, finalizer policy, namespace, RBAC, Nodes and (unless `publish_hosts` is False: a
    host registry will) the Host set published by hand; idempotent."""
    api = admin_client(cp)
    try:
        for crd in crds.all_crds():
            install_crd(api, crd)
        core = k8s.CoreV1Api(api)
        with contextlib.suppress(k8s.ApiException):
            core.create_namespace(
                k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=names.OPERATOR_NAMESPACE))
            )
        install_finalizer_policy(api)
        for host in hosts:
            with contextlib.suppress(k8s.ApiException):
                core.create_node(
                    k8s.V1Node(metadata=k8s.V1ObjectMeta(name=host, labels=dict(HOST_NODE_LABELS)))
                )
        if publish_hosts:
            publish_hosts_by_hand(core, hosts)
        # The operator's identity and RBAC as install.yaml has them: the stack fails if the
        # operator needs a permission the Manifests do not grant.
        for obj in rbac.objects(namespace=names.OPERATOR_NAMESPACE, labels=COMMON_LABELS):
            try:
                utils.create_from_dict(api, obj)
            except utils.FailToCreateError as e:
                if any(x.status != 409 for x in e.api_exceptions):
                    raise
    finally:
        api.close()


def operator_kubeconfig(cp: ControlPlane, path: Path) -> Path:
    """A kubeconfig acting as the operator's ServiceAccount (a TokenRequest token)."""
    api = admin_client(cp)
    try:
        token = request_token(
            api, names.OPERATOR_NAMESPACE, rbac.OPERATOR_SERVICE_ACCOUNT, seconds=3600
        )
    finally:
        api.close()
    return cp.write_kubeconfig(path, token=token)


async def start_hosts(
    stack: contextlib.AsyncExitStack, hosts: Mapping[str, str] = HOSTS
) -> dict[str, FakeFlintlockd]:
    """A fake flintlockd per simulated Host on its own loopback address, until `stack` ends."""
    return {
        name: await stack.enter_async_context(FakeFlintlockd.start(address=address))
        for name, address in hosts.items()
    }


@dataclass
class LocalStack:
    cp: ControlPlane
    battery: FakeBattery
    hosts: dict[str, FakeFlintlockd]
    operator: OperatorProcess
    kubeconfig: Path
    _exit: contextlib.AsyncExitStack

    async def restart_operator(self, *, crash: bool = True) -> OperatorProcess:
        """Stop the operator (SIGKILL when `crash`, as a crash would) and start a new one."""
        if crash:
            self.operator.kill()
        else:
            self.operator.stop()
        self.operator = await OperatorProcess.launch(
            kubeconfig=self.kubeconfig, battery_target=self.battery.target
        )
        self._exit.callback(self.operator.stop)
        self._exit.callback(self.operator.log_path.unlink, missing_ok=True)
        return self.operator

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls, cp: ControlPlane, workdir: Path, hosts: Mapping[str, str] = HOSTS
    ) -> AsyncIterator[LocalStack]:
        prepare_cluster(cp, hosts)
        kubeconfig = operator_kubeconfig(cp, workdir / "operator.kubeconfig")
        async with contextlib.AsyncExitStack() as stack:
            flintlocks = await start_hosts(stack, hosts)
            battery = await stack.enter_async_context(
                FakeBattery.start(hosts={name: h.target for name, h in flintlocks.items()})
            )
            operator = await stack.enter_async_context(
                OperatorProcess.start(kubeconfig=kubeconfig, battery_target=battery.target)
            )
            yield cls(cp, battery, flintlocks, operator, kubeconfig, stack)
