"""The MutatingAdmissionPolicy that stores our finalizer on every new Pool and claim.

CL-001 and PO-001 ask for the finalizer before battery is called. The controllers add it
themselves (a write, then the watch event of that write, then the reconcile that calls
battery); this policy lets the API server store it with the create instead (CL-100, PO-100),
so a claim arrives at the controller ready to bind: one write and one round trip fewer on the
path a consumer waits for (measured in tests/bench/claim_bind_bench.py).

The controllers do not rely on it. `failurePolicy: Ignore`: a cluster without the policy
(MutatingAdmissionPolicy is GA since Kubernetes 1.36), or an evaluation error, creates the
object without the finalizer, and the controller adds it as before (CL-001, PO-001).
The mutation adds the finalizer only when absent and never removes or reorders one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batteryop.api import names

Obj = dict[str, Any]

GROUP = "admissionregistration.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
"""The REST resource of each kind this module writes."""

_FINALIZER = (
    f"request.resource.resource == '{names.POOL_PLURAL}'"
    f" ? '{names.POOL_FINALIZER}' : '{names.CLAIM_FINALIZER}'"
)
_ADD_FINALIZER = """\
!has(object.metadata.finalizers)
  ? [JSONPatch{op: "add", path: "/metadata/finalizers", value: [variables.finalizer]}]
  : object.metadata.finalizers.exists(f, f == variables.finalizer)
    ? []
    : [JSONPatch{op: "add", path: "/metadata/finalizers/-", value: variables.finalizer}]
"""


def finalizer_policy_objects(labels: Mapping[str, str]) -> list[Obj]:
    """The policy and its binding (cluster-scoped), in apply order."""
    metadata = {"name": names.FINALIZER_POLICY, "labels": dict(labels)}
    policy: Obj = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata,
        "spec": {
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [names.GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": [names.CLAIM_PLURAL, names.POOL_PLURAL],
                    }
                ]
            },
            "variables": [{"name": "finalizer", "expression": _FINALIZER}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _ADD_FINALIZER}}],
        },
    }
    binding: Obj = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": dict(metadata, labels=dict(labels)),
        "spec": {"policyName": names.FINALIZER_POLICY},
    }
    return [policy, binding]
