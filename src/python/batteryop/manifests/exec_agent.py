"""The Exec Agent's part of install.yaml: its identity, its admission policy, its DaemonSet.

In apply order:

- ServiceAccount `names.EXEC_AGENT_NAME` (no automounted token; the Pod mounts a projected one).
- ClusterRole and ClusterRoleBinding `names.EXEC_AGENT_NAME`: `rbac.exec_agent_cluster_rules`
  (TokenReviews, reading and watching claims and Nodes, `patch` of Nodes, `create` and `get` of
  CSRs: EA-067).
- Role and RoleBinding `names.EXEC_AGENT_NAME` in the install namespace:
  `rbac.exec_agent_namespace_rules` (read and watch the one CA bundle ConfigMap, by name; get,
  create and delete Pods and create and delete PodDisruptionBudgets: the drain guard, EA-041).
- ValidatingAdmissionPolicy `names.EXEC_AGENT_ADMISSION_POLICY` and its binding (EA-051): for
  the agent's identity only, a write to a Node is allowed only when the identity names exactly
  one Node (the `authentication.kubernetes.io/node-name` extra of a token bound to a Pod on
  that Node), it is an update of that Node object itself (no subresource, no create, no
  delete), labels, owner references, finalizers and spec are unchanged, and only annotations
  under `names.PREFIX` are added, changed or removed. `failurePolicy: Fail`, action Deny.
  RBAC grants `patch nodes` cluster-wide; this policy is what confines it. Pods and
  PodDisruptionBudgets: the agent may only create and delete (never update, nor write a
  subresource) the drain guard of its own Node, `names.drain_guard_name(node)` in the install
  namespace; the guard Pod must be bound to that Node (`spec.nodeName`), set
  `automountServiceAccountToken: false` and have no volumes (EA-041), and be the guard exactly
  as the agent makes it (`guard_pod_validations`, EA-110): the pinned image
  (`api.drain_guard.IMAGE`) with no command or args, one container, no Host namespaces, no
  privilege or capabilities, non-root, read-only, `RuntimeDefault` seccomp, no overrides,
  nothing mounted, exposed or run besides, resources at most `api.drain_guard`'s. Each refusal
  names the field and the rule (`<field>: the drain guard <rule>`).
- DaemonSet `names.EXEC_AGENT_NAME` (EA-004): only on Nodes labelled `names.HOST_LABEL=true`,
  tolerating the Host taint; `hostNetwork`, so the exec API listens on the Host's internal
  address (`HOST_IP` from the downward API) and reaches flintlockd there (EA-001, EA-002).
  Read-only host mounts for the Host checks: `/dev` (KVM's device node), `/sys` (KVM in sysfs,
  device-mapper names) and the Host Image's not-ready directory.

Certificates: the agent makes its keys and gets its serving certificates by CSR
(`--trust-domain`, EA-060..EA-068) and signs its flintlockd client certificate with its Host's
own CA (EA-126). flintlockd's serving certificate, key and client CAs, and the Host CA's key
and certificate, go to the Host's `names.FLINTLOCKD_CERT_DIR` (a read-write host mount, the
only one; the Host Image creates it owned by the agent's user, HI-072, and the agent refuses it
otherwise, EA-125); the agent's own keys stay in its memory.

Requirements: EA-004, EA-041 (the drain guard's grants and confinement), EA-051, EA-110.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

from batteryop.api import drain_guard as guard_shape
from batteryop.api import names
from batteryop.api.times import format_duration
from batteryop.manifests import admission, rbac

Obj = dict[str, Any]

EXEC_AGENT_IMAGE_NAME: Final = "exec-agent"
"""The agent's image sits beside the operator's (`<operator repo>/exec-agent`)."""
CONTAINER: Final = "exec-agent"
EXEC_API_PORT_NAME: Final = "exec-api"
HEALTH_PORT: Final = 10271
"""The agent's /healthz, /readyz and /metrics, on the Host's network (next to the exec API)."""
HEALTH_PORT_NAME: Final = "health"

FLINTLOCKD_CERT_DIR: Final = names.FLINTLOCKD_CERT_DIR
"""flintlockd's certificate directory, at the same path on the Host and in the container."""
HOST_DEV: Final = "/host/dev"
HOST_SYS: Final = "/host/sys"
NOT_READY_DIR: Final = "/run/battery/not-ready.d"
"""Where the Host Image's units name their not-ready reasons (EA-033)."""

VOLUME_TOKEN: Final = rbac.VOLUME_TOKEN
VOLUME_FLINTLOCKD_CERTS: Final = "flintlockd-certs"
VOLUME_DEV: Final = "host-dev"
VOLUME_SYS: Final = "host-sys"
VOLUME_NOT_READY: Final = "not-ready"
VOLUME_TMP: Final = "exec-agent-tmp"
TOKEN_DIR: Final = rbac.TOKEN_DIR
RUN_AS: Final = 65532

NODE_NAME_EXTRA: Final = names.NODE_NAME_EXTRA

DRAIN_TIMEOUT: Final = timedelta(seconds=names.EXEC_AGENT_DRAIN_TIMEOUT_SECONDS)
"""How long the agent holds a drain open at most (EA-040); Host pools drain no faster (HP-004)."""

GUARD_POD_RESOURCES: Final = ("pods", "pods/status", "pods/ephemeralcontainers", "pods/resize")
"""The Pod resources the admission policy watches over: the Pod, and every subresource through
which a Pod is changed after it was made."""


def exec_agent_image_for(operator_image: str) -> str:
    """`<repo>/exec-agent:<tag>` beside `<repo>:<tag>`; a digest cannot be carried over."""
    return rbac.image_beside(operator_image, EXEC_AGENT_IMAGE_NAME, "exec_agent_image")


def agent_user(namespace: str) -> str:
    """The Kubernetes user name of the agent's ServiceAccount."""
    return f"system:serviceaccount:{namespace}:{names.EXEC_AGENT_NAME}"


# --- EA-051: the admission policy ----------------------------------------------------------------

_OLD_OR_EMPTY = "has(oldObject.metadata.{f}) ? oldObject.metadata.{f} : {empty}"
_NEW_OR_EMPTY = "has(object.metadata.{f}) ? object.metadata.{f} : {empty}"


def _unchanged(field: str, empty: str) -> str:
    new = _NEW_OR_EMPTY.format(f=field, empty=empty)
    old = _OLD_OR_EMPTY.format(f=field, empty=empty)
    return f"({new}) == ({old})"


def admission_policy_objects(namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    """The ValidatingAdmissionPolicy of EA-051 and its binding (see the module docstring)."""
    prefix = names.PREFIX
    guard = names.DRAIN_GUARD_PREFIX
    variables = [
        {
            "name": "nodeNames",
            "expression": (
                f"'{NODE_NAME_EXTRA}' in request.userInfo.extra"
                f" ? request.userInfo.extra['{NODE_NAME_EXTRA}'] : []"
            ),
        },
        {"name": "isNode", "expression": "request.resource.resource == 'nodes'"},
        {"name": "isPod", "expression": "request.resource.resource == 'pods'"},
        {"name": "isUpdate", "expression": "request.operation == 'UPDATE'"},
        {"name": "isCreate", "expression": "request.operation == 'CREATE'"},
        {
            "name": "noSubresource",
            "expression": "!has(request.subResource) || request.subResource == ''",
        },
        # The object a create makes or a delete removes (`object` is null on a delete).
        {
            "name": "target",
            "expression": "request.operation == 'DELETE' ? oldObject : object",
        },
        {
            "name": "guardName",
            "expression": (
                f"'{guard}' + (size(variables.nodeNames) == 1 ? variables.nodeNames[0] : '')"
            ),
        },
        {"name": "guardCreate", "expression": "variables.isPod && variables.isCreate"},
        {"name": "newAnnotations", "expression": _NEW_OR_EMPTY.format(f="annotations", empty="{}")},
        {"name": "oldAnnotations", "expression": _OLD_OR_EMPTY.format(f="annotations", empty="{}")},
    ]
    node_update = "!variables.isNode || !variables.isUpdate || "
    validations = [
        {
            "expression": "size(variables.nodeNames) == 1",
            "message": "the Exec Agent's identity must name exactly one Node",
        },
        # Nodes: only its own, only our annotations.
        {
            "expression": "!variables.isNode || (variables.isUpdate && variables.noSubresource)",
            "message": "the Exec Agent may only update a Node object, nothing else of it",
        },
        {
            "expression": node_update + "object.metadata.name == variables.nodeNames[0]",
            "message": "the Exec Agent may only change its own Node",
        },
        {
            "expression": node_update
            + "("
            + " && ".join(
                [
                    _unchanged("labels", "{}"),
                    _unchanged("ownerReferences", "[]"),
                    _unchanged("finalizers", "[]"),
                    "object.spec == oldObject.spec",
                ]
            )
            + ")",
            "message": "the Exec Agent may not change a Node's labels, owners, finalizers or spec",
        },
        {
            "expression": node_update
            + (
                f"(variables.newAnnotations.all(k, k.startsWith('{prefix}') ||"
                " (k in variables.oldAnnotations &&"
                " variables.oldAnnotations[k] == variables.newAnnotations[k]))"
                f" && variables.oldAnnotations.all(k, k.startsWith('{prefix}') ||"
                " k in variables.newAnnotations))"
            ),
            "message": f"the Exec Agent may only change annotations under {prefix}",
        },
        # Pods and PodDisruptionBudgets: only its own drain guard, made and removed whole
        # (EA-041).
        {
            "expression": (
                "variables.isNode || ((variables.isCreate || request.operation == 'DELETE')"
                " && variables.noSubresource)"
            ),
            "message": "the Exec Agent may only create and delete its drain guard, never change it",
        },
        {
            "expression": (
                f"variables.isNode || (request.namespace == '{namespace}'"
                " && variables.target.metadata.name == variables.guardName)"
            ),
            "message": (
                f"the Exec Agent may only create and delete the drain guard of its own Node, "
                f"{guard}<node> in {namespace}"
            ),
        },
        {
            "expression": (
                "!variables.isPod || (has(variables.target.spec.nodeName)"
                " && variables.target.spec.nodeName == variables.nodeNames[0])"
            ),
            "message": "the Exec Agent's drain guard Pod must be bound to its own Node",
        },
        {
            "expression": (
                "!variables.isPod || !variables.isCreate"
                " || (has(object.spec.automountServiceAccountToken)"
                " && object.spec.automountServiceAccountToken == false)"
            ),
            "message": "the Exec Agent's drain guard Pod must not mount a ServiceAccount token",
        },
        {
            "expression": (
                "!variables.isPod || !variables.isCreate"
                " || !has(object.spec.volumes) || size(object.spec.volumes) == 0"
            ),
            "message": "the Exec Agent's drain guard Pod must have no volumes",
        },
    ]
    validations += guard_pod_validations()
    operations = ["CREATE", "UPDATE", "DELETE"]
    metadata = {"name": names.EXEC_AGENT_ADMISSION_POLICY, "labels": dict(labels)}
    policy: Obj = {
        "apiVersion": admission.API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": list(operations),
                        "resources": ["nodes", "nodes/status", *GUARD_POD_RESOURCES],
                    },
                    {
                        "apiGroups": [rbac.POLICY_GROUP],
                        "apiVersions": ["v1"],
                        "operations": list(operations),
                        "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    },
                ]
            },
            "matchConditions": [
                {
                    "name": "exec-agent-identity",
                    "expression": f"request.userInfo.username == '{agent_user(namespace)}'",
                }
            ],
            "variables": variables,
            "validations": validations,
        },
    }
    binding: Obj = {
        "apiVersion": admission.API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata, labels=dict(labels)),
        "spec": {
            "policyName": names.EXEC_AGENT_ADMISSION_POLICY,
            "validationActions": ["Deny"],
        },
    }
    return [policy, binding]


# --- EA-110: the drain guard Pod, exactly as the agent makes it ------------------------------------

_GUARD_CREATE = "!variables.guardCreate || "
POD: Final = "object.spec"
CONTAINERS: Final = "spec.containers[*]"
"""How a message names a field of the guard's containers (each is checked)."""


def _has_chain(root: str, path: str) -> list[str]:
    """`has()` of each step of `path` under `root`: CEL's has() needs the step above it."""
    parts = path.split(".")
    return [f"has({root}.{'.'.join(parts[: i + 1])})" for i in range(len(parts))]


def _absent_or(root: str, path: str, ok: str = "false") -> str:
    """`root.path` is missing (any step of it) or `ok` holds of it (`{v}` is the value)."""
    missing = " || ".join(f"!{h}" for h in _has_chain(root, path))
    return f"{missing} || ({ok.format(v=f'{root}.{path}')})"


def _present_and(root: str, path: str, ok: str) -> str:
    """`root.path` is set and `ok` holds of it (`{v}` is the value)."""
    return " && ".join([*_has_chain(root, path), ok.format(v=f"{root}.{path}")])


def _none(root: str, path: str) -> str:
    """A list field missing or empty."""
    return _absent_or(root, path, "size({v}) == 0")


def _bounded(field: str, bounds: Mapping[str, str]) -> str:
    """Every key of the resource map `field` is one of `bounds` and at most its bound."""
    keys = ", ".join(f"'{k}'" for k in bounds)
    each = " && ".join(
        f"(!('{k}' in {field}) || quantity({field}['{k}']).compareTo(quantity('{v}')) <= 0)"
        for k, v in bounds.items()
    )
    return f"{field}.all(k, k in [{keys}]) && {each}"


def guard_pod_validations() -> list[Obj]:
    """EA-110: a Pod the agent creates is admitted only if it is the drain guard as
    `exec_agent/drain_guard.py` builds it; each rule's message names the field and the rule.

    Objects are typed in the policy's CEL, so every field is checked by name with `has()`
    (struct keys cannot be iterated): a field not named here is not refused. What is named
    covers every way the Pod Security Standards' restricted profile knows to reach the Host,
    and what runs (image, command, args, env, probes, hooks) and how much of the Host it takes
    (resources)."""
    sc = "securityContext"
    limits = dict(guard_shape.LIMITS)
    requests = dict(guard_shape.REQUESTS)
    bounds = ", ".join(f"{k} {v}" for k, v in limits.items())
    pod: list[tuple[str, str, str]] = [
        # (field, rule, message after "<field>: the drain guard ")
        (
            "spec.hostPID",
            _absent_or(POD, "hostPID", "!{v}"),
            "may not share the Host's PID namespace",
        ),
        (
            "spec.hostNetwork",
            _absent_or(POD, "hostNetwork", "!{v}"),
            "may not use the Host's network namespace",
        ),
        (
            "spec.hostIPC",
            _absent_or(POD, "hostIPC", "!{v}"),
            "may not share the Host's IPC namespace",
        ),
        (
            "spec.hostUsers",
            _absent_or(POD, "hostUsers", "!{v}"),
            "may not run in the Host's user namespace (hostUsers: true)",
        ),
        (
            "spec.shareProcessNamespace",
            _absent_or(POD, "shareProcessNamespace", "!{v}"),
            "may not share a process namespace",
        ),
        ("spec.initContainers", _none(POD, "initContainers"), "has no init containers"),
        (
            "spec.ephemeralContainers",
            _none(POD, "ephemeralContainers"),
            "has no ephemeral containers",
        ),
        ("spec.containers", f"size({POD}.containers) == 1", "has exactly one container"),
        (
            # A class of the cluster's own (a `globalDefault` one fills every new Pod's) passes:
            # bound by nodeName, the guard never meets the scheduler's preemption. The system
            # classes do not: the kubelet evicts other Pods of the Node to admit such a Pod.
            "spec.priorityClassName",
            _absent_or(POD, "priorityClassName", "!{v}.startsWith('system-')"),
            "may not take a system- priority class (the kubelet evicts other Pods for it)",
        ),
        (
            "spec.runtimeClassName",
            _absent_or(POD, "runtimeClassName", "{v} == ''"),
            "runs in the cluster's default runtime (no runtimeClassName)",
        ),
        ("spec.resourceClaims", _none(POD, "resourceClaims"), "claims no resources"),
        (
            "metadata.annotations",
            _absent_or(
                "object.metadata",
                "annotations",
                "{v}.all(k, !k.contains('apparmor') && !k.contains('seccomp'))",
            ),
            "may not set AppArmor or seccomp profiles by annotation",
        ),
        (
            f"spec.{sc}.runAsNonRoot",
            _present_and(POD, f"{sc}.runAsNonRoot", "{v}"),
            "must run as non-root (runAsNonRoot: true)",
        ),
        (
            f"spec.{sc}.runAsUser",
            _absent_or(POD, f"{sc}.runAsUser", "{v} != 0"),
            "may not run as root (0)",
        ),
        (
            f"spec.{sc}.seccompProfile",
            _present_and(POD, f"{sc}.seccompProfile", "{v}.type == 'RuntimeDefault'"),
            "must run under the runtime's default seccomp profile (RuntimeDefault)",
        ),
        (
            f"spec.{sc}.seLinuxOptions",
            _absent_or(POD, f"{sc}.seLinuxOptions"),
            "may not set SELinux options",
        ),
        (
            f"spec.{sc}.appArmorProfile",
            _absent_or(POD, f"{sc}.appArmorProfile", "{v}.type == 'RuntimeDefault'"),
            "may not override the runtime's default AppArmor profile",
        ),
        (
            f"spec.{sc}.windowsOptions",
            _absent_or(POD, f"{sc}.windowsOptions"),
            "may not set Windows options (hostProcess, user names)",
        ),
        (f"spec.{sc}.sysctls", _none(POD, f"{sc}.sysctls"), "may not set sysctls"),
    ]
    probe = "has no probes (an exec probe runs a command, an HTTP or TCP one reaches anywhere)"
    container: list[tuple[str, str, str]] = [
        ("image", f"c.image == '{guard_shape.IMAGE}'", f"runs only {guard_shape.IMAGE}"),
        ("command", _none("c", "command"), "runs its image's own entrypoint: no command"),
        ("args", _none("c", "args"), "runs its image's own entrypoint: no args"),
        ("env", _none("c", "env"), "has no environment"),
        ("envFrom", _none("c", "envFrom"), "has no environment"),
        ("ports", _none("c", "ports"), "exposes no ports (nor a hostPort)"),
        ("volumeMounts", _none("c", "volumeMounts"), "mounts nothing"),
        ("volumeDevices", _none("c", "volumeDevices"), "has no devices"),
        ("lifecycle", _absent_or("c", "lifecycle"), "has no lifecycle hooks"),
        ("livenessProbe", _absent_or("c", "livenessProbe"), probe),
        ("readinessProbe", _absent_or("c", "readinessProbe"), probe),
        ("startupProbe", _absent_or("c", "startupProbe"), probe),
        (f"{sc}.privileged", _absent_or("c", f"{sc}.privileged", "!{v}"), "may not be privileged"),
        (
            f"{sc}.capabilities",
            _present_and("c", f"{sc}.capabilities", "has({v}.drop) && 'ALL' in {v}.drop")
            + f" && ({_none(f'c.{sc}.capabilities', 'add')})",
            "must drop ALL capabilities and add none",
        ),
        (
            f"{sc}.allowPrivilegeEscalation",
            _present_and("c", f"{sc}.allowPrivilegeEscalation", "!{v}"),
            "may not escalate privileges (allowPrivilegeEscalation: false)",
        ),
        (
            f"{sc}.readOnlyRootFilesystem",
            _present_and("c", f"{sc}.readOnlyRootFilesystem", "{v}"),
            "must have a read-only root filesystem",
        ),
        (
            f"{sc}.runAsUser",
            _absent_or("c", f"{sc}.runAsUser", "{v} != 0"),
            "may not run as root (0)",
        ),
        (
            f"{sc}.runAsNonRoot",
            _absent_or("c", f"{sc}.runAsNonRoot", "{v}"),
            "must run as non-root (runAsNonRoot may not be false)",
        ),
        (
            f"{sc}.seccompProfile",
            _absent_or("c", f"{sc}.seccompProfile", "{v}.type == 'RuntimeDefault'"),
            "must run under the runtime's default seccomp profile (RuntimeDefault)",
        ),
        (
            f"{sc}.seLinuxOptions",
            _absent_or("c", f"{sc}.seLinuxOptions"),
            "may not set SELinux options",
        ),
        (
            f"{sc}.appArmorProfile",
            _absent_or("c", f"{sc}.appArmorProfile", "{v}.type == 'RuntimeDefault'"),
            "may not override the runtime's default AppArmor profile",
        ),
        (
            f"{sc}.procMount",
            _absent_or("c", f"{sc}.procMount", "{v} == 'Default'"),
            "may not unmask /proc (procMount: Default)",
        ),
        (
            f"{sc}.windowsOptions",
            _absent_or("c", f"{sc}.windowsOptions"),
            "may not set Windows options (hostProcess, user names)",
        ),
        (
            "resources.limits",
            " && ".join(
                [
                    *_has_chain("c", "resources.limits"),
                    *(f"'{k}' in c.resources.limits" for k in limits),
                    _bounded("c.resources.limits", limits),
                ]
            ),
            f"must limit, and limits only, {bounds} at most",
        ),
        (
            "resources.requests",
            _absent_or("c", "resources.requests", _bounded("{v}", requests)),
            "requests only " + ", ".join(f"{k} {v}" for k, v in requests.items()) + " at most",
        ),
    ]
    rules = [(f, r, m) for f, r, m in pod] + [
        (f"{CONTAINERS}.{f}", f"{POD}.containers.all(c, {r})", m) for f, r, m in container
    ]
    return [
        {"expression": f"{_GUARD_CREATE}({rule})", "message": f"{field}: the drain guard {message}"}
        for field, rule, message in rules
    ]


# --- identity ------------------------------------------------------------------------------------


def identity_objects(namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    """The ServiceAccount, the ClusterRole and its binding, the Role and its binding."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": names.EXEC_AGENT_NAME,
                "namespace": namespace,
                "labels": dict(labels),
            },
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "ClusterRole",
            "metadata": {"name": names.EXEC_AGENT_NAME, "labels": dict(labels)},
            "rules": rbac.exec_agent_cluster_rules(),
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": names.EXEC_AGENT_NAME, "labels": dict(labels)},
            "roleRef": {
                "apiGroup": rbac.RBAC_GROUP,
                "kind": "ClusterRole",
                "name": names.EXEC_AGENT_NAME,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": names.EXEC_AGENT_NAME, "namespace": namespace}
            ],
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "Role",
            "metadata": {
                "name": names.EXEC_AGENT_NAME,
                "namespace": namespace,
                "labels": dict(labels),
            },
            "rules": rbac.exec_agent_namespace_rules(),
        },
        {
            "apiVersion": rbac.RBAC_VERSION,
            "kind": "RoleBinding",
            "metadata": {
                "name": names.EXEC_AGENT_NAME,
                "namespace": namespace,
                "labels": dict(labels),
            },
            "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "Role", "name": names.EXEC_AGENT_NAME},
            "subjects": [
                {"kind": "ServiceAccount", "name": names.EXEC_AGENT_NAME, "namespace": namespace}
            ],
        },
    ]


# --- the DaemonSet -------------------------------------------------------------------------------


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def container(image: str) -> Obj:
    return {
        "name": CONTAINER,
        "image": image,
        "args": [
            f"--port={names.EXEC_AGENT_PORT}",
            f"--flintlockd=$(HOST_IP):{names.FLINTLOCKD_PORT}",
            f"--trust-domain={names.DEFAULT_TRUST_DOMAIN}",  # EA-060..EA-068: by CSR
            f"--flintlockd-cert-dir={FLINTLOCKD_CERT_DIR}",
            f"--kvm-device={HOST_DEV}/kvm",
            f"--kvm-sysfs-dir={HOST_SYS}/class/misc/kvm",
            f"--sys-block-dir={HOST_SYS}/block",
            f"--not-ready-dir={NOT_READY_DIR}",
            f"--health-probe-bind-address=$(HOST_IP):{HEALTH_PORT}",
            "--guard-namespace=$(POD_NAMESPACE)",  # EA-041: the drain guard beside the agent
            f"--guard-image={names.DRAIN_GUARD_IMAGE}",
            f"--drain-timeout={format_duration(DRAIN_TIMEOUT)}",  # EA-040
        ],
        "env": [
            _field_env("NODE_NAME", "spec.nodeName"),
            _field_env("HOST_IP", "status.hostIP"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ],
        "ports": [
            {
                "name": EXEC_API_PORT_NAME,
                "containerPort": names.EXEC_AGENT_PORT,
                "hostPort": names.EXEC_AGENT_PORT,
                "protocol": "TCP",
            },
            {
                "name": HEALTH_PORT_NAME,
                "containerPort": HEALTH_PORT,
                "hostPort": HEALTH_PORT,
                "protocol": "TCP",
            },
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": HEALTH_PORT_NAME},
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": HEALTH_PORT_NAME},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
        },
        "resources": {
            "requests": {"cpu": "20m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": f"{names.EXEC_AGENT_MEMORY_LIMIT_MIB}Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": VOLUME_TOKEN, "mountPath": TOKEN_DIR, "readOnly": True},
            {"name": VOLUME_FLINTLOCKD_CERTS, "mountPath": FLINTLOCKD_CERT_DIR},
            {"name": VOLUME_DEV, "mountPath": HOST_DEV, "readOnly": True},
            {"name": VOLUME_SYS, "mountPath": HOST_SYS, "readOnly": True},
            {"name": VOLUME_NOT_READY, "mountPath": NOT_READY_DIR, "readOnly": True},
            rbac.tmp_mount(VOLUME_TMP),  # found missing by the real node (issue 23)
        ],
    }


def _host_path(name: str, path: str, kind: str) -> Obj:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def daemon_set_object(namespace: str, labels: Mapping[str, str], image: str) -> Obj:
    """The DaemonSet (EA-004): one agent per Host, no agent elsewhere."""
    selector = dict(labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": names.EXEC_AGENT_NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": names.EXEC_AGENT_NAME,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "hostNetwork": True,  # EA-002: the Host's internal address
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "nodeSelector": {names.HOST_LABEL: names.HOST_LABEL_VALUE},  # EA-004
                    "tolerations": [
                        {
                            "key": names.HOST_TAINT_KEY,
                            "operator": "Equal",
                            "value": names.HOST_TAINT_VALUE,
                            "effect": names.HOST_TAINT_EFFECT,
                        }
                    ],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container(image)],
                    "volumes": [
                        rbac.token_volume(namespace_file=False),
                        _host_path(VOLUME_FLINTLOCKD_CERTS, FLINTLOCKD_CERT_DIR, "Directory"),
                        _host_path(VOLUME_DEV, "/dev", "Directory"),
                        _host_path(VOLUME_SYS, "/sys", "Directory"),
                        _host_path(VOLUME_NOT_READY, NOT_READY_DIR, "DirectoryOrCreate"),
                        rbac.tmp_volume(VOLUME_TMP),
                    ],
                },
            },
        },
    }


def objects(namespace: str, labels: Mapping[str, str], image: str) -> list[Obj]:
    """Every object of the Exec Agent, in apply order."""
    return [
        *identity_objects(namespace, labels),
        *admission_policy_objects(namespace, labels),
        daemon_set_object(namespace, labels, image),
    ]
