"""Attack: a taken Exec Agent credential makes a drain guard that is root on its Host (issue 43).

The agent's identity may create `exec-agent-drain-guard-<its Node>` in its namespace (EA-041),
and that namespace cannot carry Pod Security labels (the DaemonSet beside it needs the Host).
So the admission policy of EA-051 is all that stands between the agent's token and a
privileged, hostPID Pod on its Host. Driven here as the attacker would: the agent's own token,
bound to its Pod on its Node, against the real API server with install.yaml's policy, creating
the Pod the agent really builds (`guard_objects`) with one hostile field each (dry run: a
policy that admits one leaves nothing behind). Each refusal must come from the policy and name
the field. The guard exactly as the agent makes it is admitted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.exec_agent_policy import (
    NS,
    agent_on,
    hosts,
    install_exec_agent,
    policy_active,
    real_guard,
    refusal,
)

Pod = dict[str, Any]
RUNTIME_CLASS = "attack-runc"
"""A RuntimeClass the attack names (the API server refuses a Pod naming one that is missing)."""


@pytest.fixture(scope="module")
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        install_exec_agent(api)
        k8s.NodeV1Api(api).create_runtime_class(
            {"metadata": {"name": RUNTIME_CLASS}, "handler": "runc"}
        )
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def host(admin: k8s.ApiClient) -> Iterator[str]:
    with hosts(admin, 1) as (node,):
        yield node


@pytest.fixture(scope="module")
def agent(admin: k8s.ApiClient, controlplane: ControlPlane, host: str) -> Iterator[k8s.ApiClient]:
    """The agent's own credential: its ServiceAccount's token bound to its Pod on `host`."""
    api = agent_on(admin, controlplane, host)
    try:
        yield api
    finally:
        api.close()


def _spec(pod: Pod) -> Pod:
    return pod["spec"]  # type: ignore[no-any-return]


def _pod_sc(pod: Pod) -> Pod:
    return pod["spec"].setdefault("securityContext", {})  # type: ignore[no-any-return]


def _ctr(pod: Pod) -> Pod:
    return pod["spec"]["containers"][0]  # type: ignore[no-any-return]


def _ctr_sc(pod: Pod) -> Pod:
    return _ctr(pod).setdefault("securityContext", {})  # type: ignore[no-any-return]


CONTAINERS = "spec.containers[*]"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/guard"
"""AppArmor's old way to name a container's profile, still honoured."""
SHELL = ["/bin/sh", "-c", "nsenter -t 1 -m -u -i -n -p -- sh"]
EXEC = {"exec": {"command": SHELL}}

HOSTILE: list[tuple[str, Callable[[Pod], Any]]] = [
    # The Pod: the Host's namespaces, other containers, what runs it.
    ("spec.hostPID", lambda p: _spec(p).update(hostPID=True)),
    ("spec.hostNetwork", lambda p: _spec(p).update(hostNetwork=True)),
    ("spec.hostIPC", lambda p: _spec(p).update(hostIPC=True)),
    ("spec.hostUsers", lambda p: _spec(p).update(hostUsers=True)),
    ("spec.shareProcessNamespace", lambda p: _spec(p).update(shareProcessNamespace=True)),
    (
        "spec.initContainers",
        lambda p: _spec(p).update(initContainers=[dict(_ctr(p), name="init", command=SHELL)]),
    ),
    ("spec.containers", lambda p: _spec(p)["containers"].append(dict(_ctr(p), name="second"))),
    ("spec.priorityClassName", lambda p: _spec(p).update(priorityClassName="system-node-critical")),
    ("spec.runtimeClassName", lambda p: _spec(p).update(runtimeClassName=RUNTIME_CLASS)),
    (
        "spec.resourceClaims",
        lambda p: _spec(p).update(resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu"}]),
    ),
    (
        "metadata.annotations",
        lambda p: p["metadata"].update(annotations={APPARMOR_ANNOTATION: "unconfined"}),
    ),
    # The Pod's securityContext.
    ("spec.securityContext.runAsNonRoot", lambda p: _pod_sc(p).update(runAsNonRoot=False)),
    ("spec.securityContext.runAsUser", lambda p: _pod_sc(p).update(runAsUser=0)),
    (
        "spec.securityContext.seccompProfile",
        lambda p: _pod_sc(p).update(seccompProfile={"type": "Unconfined"}),
    ),
    (
        "spec.securityContext.seLinuxOptions",
        lambda p: _pod_sc(p).update(seLinuxOptions={"type": "spc_t"}),
    ),
    (
        "spec.securityContext.appArmorProfile",
        lambda p: _pod_sc(p).update(appArmorProfile={"type": "Unconfined"}),
    ),
    (
        "spec.securityContext.windowsOptions",
        lambda p: _pod_sc(p).update(windowsOptions={"runAsUserName": "ContainerAdministrator"}),
    ),
    (
        "spec.securityContext.sysctls",
        lambda p: _pod_sc(p).update(sysctls=[{"name": "net.ipv4.ip_forward", "value": "1"}]),
    ),
    # The container: what it runs.
    (f"{CONTAINERS}.image", lambda p: _ctr(p).update(image="docker.io/library/alpine:3")),
    (f"{CONTAINERS}.command", lambda p: _ctr(p).update(command=SHELL)),
    (f"{CONTAINERS}.args", lambda p: _ctr(p).update(args=["-c", "id"])),
    (f"{CONTAINERS}.env", lambda p: _ctr(p).update(env=[{"name": "A", "value": "1"}])),
    (
        f"{CONTAINERS}.envFrom",
        lambda p: _ctr(p).update(envFrom=[{"secretRef": {"name": "battery-client-tls"}}]),
    ),
    (f"{CONTAINERS}.ports", lambda p: _ctr(p).update(ports=[{"containerPort": 8080}])),
    (
        f"{CONTAINERS}.ports",
        lambda p: _ctr(p).update(ports=[{"containerPort": 22, "hostPort": 22}]),
    ),
    (f"{CONTAINERS}.lifecycle", lambda p: _ctr(p).update(lifecycle={"postStart": EXEC})),
    (f"{CONTAINERS}.livenessProbe", lambda p: _ctr(p).update(livenessProbe=EXEC)),
    (f"{CONTAINERS}.readinessProbe", lambda p: _ctr(p).update(readinessProbe=EXEC)),
    (f"{CONTAINERS}.startupProbe", lambda p: _ctr(p).update(startupProbe=EXEC)),
    # The container's securityContext.
    (
        f"{CONTAINERS}.securityContext.privileged",
        # (privileged with allowPrivilegeEscalation: false is invalid in itself)
        lambda p: (_ctr_sc(p).pop("allowPrivilegeEscalation"), _ctr_sc(p).update(privileged=True)),
    ),
    (
        f"{CONTAINERS}.securityContext.capabilities",
        lambda p: _ctr_sc(p).update(capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}),
    ),
    (
        f"{CONTAINERS}.securityContext.capabilities",
        lambda p: _ctr_sc(p).pop("capabilities"),
    ),
    (
        f"{CONTAINERS}.securityContext.allowPrivilegeEscalation",
        lambda p: _ctr_sc(p).update(allowPrivilegeEscalation=True),
    ),
    (
        f"{CONTAINERS}.securityContext.readOnlyRootFilesystem",
        lambda p: _ctr_sc(p).update(readOnlyRootFilesystem=False),
    ),
    (f"{CONTAINERS}.securityContext.runAsUser", lambda p: _ctr_sc(p).update(runAsUser=0)),
    (
        f"{CONTAINERS}.securityContext.runAsNonRoot",
        lambda p: _ctr_sc(p).update(runAsNonRoot=False),
    ),
    (
        f"{CONTAINERS}.securityContext.seccompProfile",
        lambda p: _ctr_sc(p).update(seccompProfile={"type": "Unconfined"}),
    ),
    (
        f"{CONTAINERS}.securityContext.seLinuxOptions",
        lambda p: _ctr_sc(p).update(seLinuxOptions={"type": "spc_t"}),
    ),
    (
        f"{CONTAINERS}.securityContext.appArmorProfile",
        lambda p: _ctr_sc(p).update(appArmorProfile={"type": "Unconfined"}),
    ),
    (
        f"{CONTAINERS}.securityContext.procMount",
        lambda p: (_spec(p).update(hostUsers=False), _ctr_sc(p).update(procMount="Unmasked")),
    ),
    (
        f"{CONTAINERS}.securityContext.windowsOptions",
        lambda p: _ctr_sc(p).update(windowsOptions={"runAsUserName": "ContainerAdministrator"}),
    ),
    # The container's resources: bounded by what the agent asks for.
    (
        f"{CONTAINERS}.resources.limits",
        lambda p: _ctr(p)["resources"]["limits"].update(memory="64Gi"),
    ),
    (f"{CONTAINERS}.resources.limits", lambda p: _ctr(p)["resources"]["limits"].update(cpu="64")),
    (f"{CONTAINERS}.resources.limits", lambda p: _ctr(p)["resources"]["limits"].pop("cpu")),
    (
        f"{CONTAINERS}.resources.limits",
        lambda p: _ctr(p)["resources"].update(
            limits={**_ctr(p)["resources"]["limits"], "example.com/device": "1"},
            requests={**_ctr(p)["resources"]["requests"], "example.com/device": "1"},
        ),
    ),
    (
        f"{CONTAINERS}.resources.requests",
        lambda p: _ctr(p)["resources"]["requests"].update(memory="16Mi", cpu="10m"),
    ),
]


@pytest.mark.controlplane
@pytest.mark.req("EA-041", "EA-051", "EA-110")
async def test_the_agents_own_guard_is_admitted(
    admin: k8s.ApiClient, agent: k8s.ApiClient, host: str
) -> None:
    await policy_active(agent, host)
    budget, pod = real_guard(admin, host)
    name = names.drain_guard_name(host)
    k8s.PolicyV1Api(agent).create_namespaced_pod_disruption_budget(NS, budget)
    try:
        k8s.CoreV1Api(agent).create_namespaced_pod(NS, pod)
        k8s.CoreV1Api(agent).delete_namespaced_pod(name, NS)
    finally:
        k8s.PolicyV1Api(agent).delete_namespaced_pod_disruption_budget(name, NS)


@pytest.mark.controlplane
@pytest.mark.req("EA-110")
@pytest.mark.parametrize(("field", "hostile"), HOSTILE, ids=[f for f, _ in HOSTILE])
async def test_a_hostile_guard_is_refused_naming_the_field(
    admin: k8s.ApiClient,
    agent: k8s.ApiClient,
    host: str,
    field: str,
    hostile: Callable[[Pod], Any],
) -> None:
    await policy_active(agent, host)
    _, pod = real_guard(admin, host)
    pod = copy.deepcopy(pod)
    hostile(pod)
    message = refusal(lambda: k8s.CoreV1Api(agent).create_namespaced_pod(NS, pod, dry_run="All"))
    assert names.EXEC_AGENT_ADMISSION_POLICY in message, message
    assert f"{field}: the drain guard" in message, message


@pytest.mark.controlplane
@pytest.mark.req("EA-110")
async def test_a_priority_class_of_the_clusters_own_does_not_keep_the_guard_out(
    admin: k8s.ApiClient, agent: k8s.ApiClient, host: str
) -> None:
    """A cluster whose PriorityClass is `globalDefault` gives every new Pod its name; the guard
    must still be admitted then (only the system- classes are refused)."""
    await policy_active(agent, host)
    scheduling = k8s.SchedulingV1Api(admin)
    klass = f"batteryop-test-{host}"
    scheduling.create_priority_class(
        k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name=klass), value=1000)
    )
    try:
        _, pod = real_guard(admin, host)
        pod = copy.deepcopy(pod)
        _spec(pod).update(priorityClassName=klass)
        k8s.CoreV1Api(agent).create_namespaced_pod(NS, pod, dry_run="All")
    finally:
        scheduling.delete_priority_class(klass)
