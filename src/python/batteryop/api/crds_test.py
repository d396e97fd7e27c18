"""The CRDs, checked two ways.

Unit checks read the YAML: it agrees with `names` and with the Python defaults, and its
repeated blocks have not drifted apart. The rest installs both CRDs into the real
kube-apiserver and proves each RS rule there: invalid Pools and claims are refused with a 422
whose message names the field, the samples are accepted with the CRD's defaults filled in,
and updates to immutable fields are refused.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from kubernetes import client as k8s

from batteryop.api import crds, names, samples
from batteryop.api import lease as lease_api
from batteryop.api import pool as pool_api
from batteryop.api.claim import MicroVMClaim
from batteryop.api.pool import Pool
from batteryop.api.times import format_duration, format_time
from batteryop.testing.controlplane import ControlPlane, install_crd

DELETE = object()
"""Stands for "remove this field" in a mutation."""


def schema(crd: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def at(node: dict[str, Any], *path: str) -> dict[str, Any]:
    """The schema of the property at `path` (an `[]` step enters a list's items)."""
    for step in path:
        node = node["items"] if step == "[]" else node["properties"][step]
    return node


# --- unit checks on the YAML -----------------------------------------------------------------


def test_pool_crd_defaults_are_the_python_defaults() -> None:
    spec = at(schema(crds.pool_crd()), "spec")
    assert at(spec, "replenishment", "type")["default"] == pool_api.DEFAULT_REPLENISHMENT_TYPE
    assert at(spec, "hooks", "failurePolicy")["default"] == pool_api.DEFAULT_HOOK_FAILURE_POLICY
    iface_type = at(spec, "template", "interfaces", "[]", "type")
    assert iface_type["default"] == pool_api.DEFAULT_INTERFACE_TYPE
    lease = at(spec, "lease")
    assert lease["properties"]["heartbeatInterval"]["default"] == format_duration(
        lease_api.DEFAULT_HEARTBEAT_INTERVAL
    )
    assert lease["properties"]["expiryThreshold"]["default"] == format_duration(
        lease_api.DEFAULT_EXPIRY_THRESHOLD
    )
    # PO-104's floor, which the Exec Agent's grace before the first expiry rests on (EA-013).
    floor = f"duration(self) >= duration('{format_duration(lease_api.MIN_EXPIRY_THRESHOLD)}')"
    rules = lease["properties"]["expiryThreshold"]["x-kubernetes-validations"]
    assert any(rule["rule"].endswith(floor) for rule in rules), rules
    for obj in ("placement", "replenishment", "hooks", "lease"):
        assert at(spec, obj)["default"] == {}
    assert at(spec, "autoscaling", "minIdle")["default"] == pool_api.DEFAULT_MIN_IDLE
    assert at(spec, "autoscaling", "window")["default"] == format_duration(
        pool_api.DEFAULT_AUTOSCALING_WINDOW
    )


def test_pool_crd_enums_are_the_python_enums() -> None:
    spec = at(schema(crds.pool_crd()), "spec")
    assert at(spec, "replenishment", "type")["enum"] == list(pool_api.ReplenishmentType)
    assert at(spec, "hooks", "failurePolicy")["enum"] == list(pool_api.HookFailurePolicy)
    assert at(spec, "template", "interfaces", "[]", "type")["enum"] == list(pool_api.InterfaceType)


def test_claim_crd_phases_are_the_python_phases() -> None:
    from batteryop.api.conditions import ClaimPhase

    assert at(schema(crds.claim_crd()), "status", "phase")["enum"] == list(ClaimPhase)


def test_the_repeated_schema_blocks_have_not_drifted() -> None:
    template = at(schema(crds.pool_crd()), "spec", "template")
    root = copy.deepcopy(at(template, "rootVolume"))
    extra = at(template, "additionalVolumes", "[]")
    # The root volume alone may not be virtiofs, and says so in its description.
    root["x-kubernetes-validations"] = root["x-kubernetes-validations"][:1]
    del root["description"]
    assert root == extra
    pool_cond = at(schema(crds.pool_crd()), "status", "conditions")
    claim_cond = at(schema(crds.claim_crd()), "status", "conditions")
    assert pool_cond["items"] == claim_cond["items"]


def test_the_manifest_holds_both_crds() -> None:
    import yaml

    docs = [d for d in yaml.safe_load_all(crds.manifest()) if d]
    assert [d["metadata"]["name"] for d in docs] == [names.POOL_CRD_NAME, names.CLAIM_CRD_NAME]
    assert docs == crds.all_crds()


def test_a_loaded_crd_is_a_fresh_copy() -> None:
    crds.pool_crd()["spec"]["group"] = "changed"
    assert crds.pool_crd()["spec"]["group"] == names.GROUP


# --- against the real kube-apiserver ---------------------------------------------------------


class Objects:
    """Pools and claims in one namespace, through the real API server."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, plural, body
        )
        return result

    def patch(self, plural: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            self.namespace,
            plural,
            name,
            patch,
            _content_type="application/merge-patch+json",
        )
        return result

    def patch_status(self, plural: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            self.namespace,
            plural,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
        return result

    def get(self, plural: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, plural, name
        )
        return result


def refusal(call: Callable[[], Any]) -> str:
    """The message of the 422 that `call` must get."""
    with pytest.raises(k8s.ApiException) as err:
        call()
    assert err.value.status == 422, err.value.body
    message: str = json.loads(err.value.body)["message"]
    return message


@pytest.fixture
def objects(kube_admin: k8s.ApiClient, namespace: str) -> Objects:
    for body in crds.all_crds():
        install_crd(kube_admin, body)
    return Objects(kube_admin, namespace)


def mutate(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `body` with the dotted `path` (list indices as numbers) set or removed."""
    out = copy.deepcopy(body)
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.split(".")]
    node: Any = out
    for key in keys[:-1]:
        node = node[key]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return out


def invalid(
    path: str, value: Any, *expected: str, req: pytest.MarkDecorator | None = None, id: str = ""
) -> Any:
    marks = [req] if req else []
    return pytest.param(path, value, expected, marks=marks, id=id or f"{path}={value!r}"[:60])


VIRTIOFS = {"id": "share", "virtiofsSource": "/srv"}
MAX_SIZE = 10_000
"""PO-105: the largest Pool (docs/requirements/03-pools.md says why)."""

POOL_CASES = [
    # RS-012: negative size, enum values battery does not define.
    invalid(
        "spec.size", -1, "spec.size", "greater than or equal to 0", req=pytest.mark.req("RS-012")
    ),
    invalid(
        "spec.replenishment.type",
        "Eventually",
        "spec.replenishment.type",
        "Unsupported value",
        req=pytest.mark.req("RS-012"),
    ),
    invalid(
        "spec.hooks.failurePolicy",
        "Retry",
        "spec.hooks.failurePolicy",
        "Unsupported value",
        req=pytest.mark.req("RS-012"),
    ),
    invalid(
        "spec.template.interfaces.0.type",
        "Veth",
        "spec.template.interfaces[0].type",
        "Unsupported value",
        req=pytest.mark.req("RS-012"),
    ),
    # RS-014, RS-015: flintlock's ranges.
    invalid(
        "spec.template.vcpu",
        0,
        "spec.template.vcpu",
        "greater than or equal to 1",
        req=pytest.mark.req("RS-014"),
    ),
    invalid(
        "spec.template.vcpu",
        65,
        "spec.template.vcpu",
        "less than or equal to 64",
        req=pytest.mark.req("RS-014"),
    ),
    invalid(
        "spec.template.memoryInMb",
        1023,
        "spec.template.memoryInMb",
        "greater than or equal to 1024",
        req=pytest.mark.req("RS-015"),
    ),
    invalid(
        "spec.template.memoryInMb",
        32769,
        "spec.template.memoryInMb",
        "less than or equal to 32768",
        req=pytest.mark.req("RS-015"),
    ),
    # RS-016: at least one interface.
    invalid(
        "spec.template.interfaces",
        [],
        "spec.template.interfaces",
        "at least 1 items",
        req=pytest.mark.req("RS-016"),
    ),
    invalid(
        "spec.template.interfaces",
        DELETE,
        "spec.template.interfaces: Required value",
        req=pytest.mark.req("RS-016"),
        id="interfaces-missing",
    ),
    # RS-010: the spec's fields, as battery and flintlock accept them.
    invalid(
        "spec.template",
        DELETE,
        "spec.template: Required value",
        req=pytest.mark.req("RS-010"),
        id="template-missing",
    ),
    invalid(
        "spec.size",
        DELETE,
        "spec.size: Required value",
        req=pytest.mark.req("RS-010"),
        id="size-missing",
    ),
    invalid(
        "spec.replenishment",
        {"type": "MinSizeThreshold"},
        "spec.replenishment.minSize",
        "required when spec.replenishment.type is MinSizeThreshold",
        req=pytest.mark.req("RS-010"),
        id="minSize-missing",
    ),
    invalid(
        "spec.replenishment",
        {"type": "MinSizeThreshold", "minSize": 0},
        "spec.replenishment.minSize",
        "greater than or equal to 1",
        req=pytest.mark.req("RS-010"),
        id="minSize-0",
    ),
    invalid(
        "spec.lease.heartbeatInterval",
        "0s",
        "spec.lease.heartbeatInterval",
        "must be a duration of at least 1s",
        req=pytest.mark.req("RS-010", "PO-104"),
    ),
    invalid(
        "spec.lease.expiryThreshold",
        "-5s",
        "spec.lease.expiryThreshold",
        "must be a duration of at least 2s",
        req=pytest.mark.req("RS-010", "PO-104"),
    ),
    # PO-103..PO-105: lease terms a Holder can keep, a size battery can hold.
    invalid(
        "spec.lease",
        {"heartbeatInterval": "30s", "expiryThreshold": "30s"},
        "spec.lease.heartbeatInterval",
        "must be shorter than spec.lease.expiryThreshold",
        req=pytest.mark.req("PO-103"),
        id="heartbeat-equals-expiry",
    ),
    invalid(
        "spec.lease",
        {"expiryThreshold": "5s"},
        "spec.lease.heartbeatInterval",
        "must be shorter than spec.lease.expiryThreshold",
        req=pytest.mark.req("PO-103"),
        id="default-heartbeat-above-expiry",
    ),
    invalid(
        "spec.lease.heartbeatInterval",
        "1ns",
        "spec.lease.heartbeatInterval",
        "must be a duration of at least 1s",
        req=pytest.mark.req("PO-104"),
    ),
    invalid(
        "spec.lease.heartbeatInterval",
        "999ms",
        "spec.lease.heartbeatInterval",
        "must be a duration of at least 1s",
        req=pytest.mark.req("PO-104"),
    ),
    invalid(
        "spec.lease",
        {"heartbeatInterval": "1s", "expiryThreshold": "1999ms"},
        "spec.lease.expiryThreshold",
        "must be a duration of at least 2s",
        req=pytest.mark.req("PO-104"),
        id="expiry-below-2s",
    ),
    invalid(
        "spec.size",
        MAX_SIZE + 1,
        "spec.size",
        f"less than or equal to {MAX_SIZE}",
        req=pytest.mark.req("PO-105"),
    ),
    invalid(
        "spec.size",
        2**31 - 1,
        "spec.size",
        f"less than or equal to {MAX_SIZE}",
        req=pytest.mark.req("PO-105"),
    ),
    invalid(
        "spec.lease.expiryThreshold",
        "30 seconds",
        "spec.lease.expiryThreshold",
        "should match",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.kernel.filename",
        DELETE,
        "spec.template.kernel.filename: Required value",
        req=pytest.mark.req("RS-010"),
        id="kernel-filename-missing",
    ),
    invalid(
        "spec.template.kernel.image",
        "",
        "spec.template.kernel.image",
        "at least 1 chars",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.provider",
        "qemu",
        "spec.template.provider",
        "Unsupported value",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.rootVolume",
        {"id": "root"},
        "spec.template.rootVolume",
        "exactly one of containerSource and virtiofsSource must be set",
        req=pytest.mark.req("RS-010"),
        id="rootVolume-no-source",
    ),
    invalid(
        "spec.template.rootVolume",
        {"containerSource": "img", "virtiofsSource": "/srv"},
        "spec.template.rootVolume",
        "exactly one of containerSource and virtiofsSource must be set",
        req=pytest.mark.req("RS-010"),
        id="rootVolume-two-sources",
    ),
    invalid(
        "spec.template.rootVolume",
        {"virtiofsSource": "/srv"},
        "spec.template.rootVolume.virtiofsSource",
        "cannot be a virtiofs volume",
        req=pytest.mark.req("RS-010"),
        id="rootVolume-virtiofs",
    ),
    invalid(
        "spec.template.additionalVolumes",
        [{"id": "a"}],
        "spec.template.additionalVolumes[0]",
        "exactly one of containerSource and virtiofsSource must be set",
        req=pytest.mark.req("RS-010"),
        id="volume-no-source",
    ),
    invalid(
        "spec.template.additionalVolumes",
        [VIRTIOFS, VIRTIOFS],
        "spec.template.additionalVolumes",
        "at most one virtiofs volume",
        req=pytest.mark.req("RS-010"),
        id="two-virtiofs",
    ),
    invalid(
        "spec.template.additionalVolumes",
        [{"containerSource": "img", "sizeInMb": 0}],
        "spec.template.additionalVolumes[0].sizeInMb",
        "greater than or equal to 1",
        req=pytest.mark.req("RS-010"),
        id="volume-size-0",
    ),
    invalid(
        "spec.template.interfaces.0.deviceId",
        "eth0",
        "spec.template.interfaces[0].deviceId",
        "eth0 is reserved by flintlock",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.interfaces.0.deviceId",
        "eth/1",
        "spec.template.interfaces[0].deviceId",
        "should match",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.interfaces.0.deviceId",
        "e" * 16,
        "spec.template.interfaces[0].deviceId",
        "Too long",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.interfaces",
        [{"deviceId": "eth1"}, {"deviceId": "eth1"}],
        "spec.template.interfaces",
        "must not repeat a deviceId",
        req=pytest.mark.req("RS-010"),
        id="deviceId-repeated",
    ),
    invalid(
        "spec.template.interfaces.0.guestMac",
        "02:00:00:00:00",
        "spec.template.interfaces[0].guestMac",
        "should match",
        req=pytest.mark.req("RS-010"),
    ),
    invalid(
        "spec.template.interfaces.0.address",
        {"address": "10.0.0.5"},
        "spec.template.interfaces[0].address.address",
        "prefix length",
        req=pytest.mark.req("RS-010"),
        id="address-no-prefix",
    ),
    invalid(
        "spec.template.interfaces.0.address",
        {"address": "10.0.0.5/24", "gateway": "gw"},
        "spec.template.interfaces[0].address.gateway",
        "must be an IP address",
        req=pytest.mark.req("RS-010"),
        id="gateway-not-ip",
    ),
    invalid(
        "spec.template.interfaces.0.address",
        {"address": "10.0.0.5/24", "nameservers": ["dns"]},
        "spec.template.interfaces[0].address.nameservers[0]",
        "must be an IP address",
        req=pytest.mark.req("RS-010"),
        id="nameserver-not-ip",
    ),
    invalid(
        "spec.template.interfaces.0.overrides",
        {},
        "spec.template.interfaces[0].overrides.bridgeName: Required value",
        req=pytest.mark.req("RS-010"),
        id="overrides-without-bridge",
    ),
    invalid(
        "spec.template.metadata",
        {"user-data": "not base64!"},
        "spec.template.metadata.user-data",
        "byte",
        req=pytest.mark.req("RS-010"),
        id="metadata-not-base64",
    ),
    # RS-011: the selector is a map of strings.
    invalid(
        "spec.placement.nodeSelector",
        {"zone": 1},
        "spec.placement.nodeSelector.zone",
        "string",
        req=pytest.mark.req("RS-011"),
        id="selector-value-not-string",
    ),
]


@pytest.mark.controlplane
@pytest.mark.parametrize(("path", "value", "expected"), POOL_CASES)
def test_an_invalid_pool_is_refused_naming_the_field(
    objects: Objects, path: str, value: Any, expected: tuple[str, ...]
) -> None:
    body = mutate(samples.sample_pool(), path, value)
    message = refusal(lambda: objects.create(names.POOL_PLURAL, body))
    for text in expected:
        assert text in message, message


CLAIM_CASES = [
    invalid(
        "spec.poolRef",
        DELETE,
        "spec.poolRef: Required value",
        req=pytest.mark.req("RS-020"),
        id="poolRef-missing",
    ),
    invalid(
        "spec.poolRef.name",
        "",
        "spec.poolRef.name",
        "at least 1 chars",
        req=pytest.mark.req("RS-020"),
    ),
    invalid(
        "spec.poolRef.name",
        "p" * 254,
        "spec.poolRef.name",
        "Too long",
        req=pytest.mark.req("RS-020"),
    ),
    invalid(
        "spec.poolRef.name",
        "Not_A_Name",
        "spec.poolRef.name",
        "should match",
        req=pytest.mark.req("RS-020"),
    ),
    invalid(
        "spec.serviceAccountName",
        DELETE,
        "spec.serviceAccountName: Required value",
        req=pytest.mark.req("RS-021"),
        id="sa-missing",
    ),
    invalid(
        "spec.serviceAccountName",
        "",
        "spec.serviceAccountName",
        "at least 1 chars",
        req=pytest.mark.req("RS-021"),
    ),
    invalid("spec.renewTime", "soon", "spec.renewTime", "date-time", req=pytest.mark.req("RS-023")),
    invalid(
        "spec.renewTime",
        "2026-05-01T12:00:10." + "0" * 60 + "Z",
        "spec.renewTime",
        "Too long",
        req=pytest.mark.req("PO-106"),
        id="renewTime-too-long",
    ),
    invalid(
        "spec", DELETE, "spec: Required value", req=pytest.mark.req("RS-020"), id="spec-missing"
    ),
]


@pytest.mark.controlplane
@pytest.mark.parametrize(("path", "value", "expected"), CLAIM_CASES)
def test_an_invalid_claim_is_refused_naming_the_field(
    objects: Objects, path: str, value: Any, expected: tuple[str, ...]
) -> None:
    body = mutate(samples.sample_claim(), path, value)
    message = refusal(lambda: objects.create(names.CLAIM_PLURAL, body))
    for text in expected:
        assert text in message, message


@pytest.mark.controlplane
@pytest.mark.req("RS-001", "RS-010", "RS-011")
def test_the_sample_pool_is_stored_as_written(objects: Objects) -> None:
    body = samples.sample_pool()
    stored = objects.create(names.POOL_PLURAL, body)
    assert stored["spec"] == body["spec"]
    pool = Pool.from_dict(stored)
    assert pool.spec == Pool.from_dict(body).spec
    assert pool.metadata.namespace == objects.namespace and pool.metadata.generation == 1


@pytest.mark.controlplane
@pytest.mark.req("RS-010", "RS-012")
def test_the_demo_pool_is_accepted_with_the_defaults_filled_in(objects: Objects) -> None:
    body = samples.demo_pool()
    del body["spec"]["placement"]
    body["spec"]["template"]["interfaces"] = [{"deviceId": "eth1"}]
    stored = objects.create(names.POOL_PLURAL, body)
    spec = stored["spec"]
    assert spec["placement"] == {}
    assert spec["replenishment"] == {"type": "ImmediateOnLease"}
    assert spec["hooks"] == {"create": ["uname -r"], "failurePolicy": "DeleteAndReplace"}
    assert spec["lease"] == {"heartbeatInterval": "10s", "expiryThreshold": "30s"}
    assert spec["template"]["interfaces"] == [{"deviceId": "eth1", "type": "Macvtap"}]
    # Python reads the unfilled body as the server filled it, and renders what it stored.
    assert Pool.from_dict(body).spec == Pool.from_dict(stored).spec
    assert Pool.from_dict(stored).spec.to_dict() == spec


def every_field_pool() -> dict[str, Any]:
    """The sample Pool with every optional field of the spec set."""
    body = samples.sample_pool()
    template = body["spec"]["template"]
    template.update(
        provider="cloudhypervisor",
        initrd={"image": "ghcr.io/example/initrd:1", "filename": "initrd.img"},
        additionalVolumes=[
            {
                "id": "data",
                "containerSource": "ghcr.io/example/data:1",
                "sizeInMb": 2048,
                "mountPoint": "/data",
                "partitionId": "5f2b0c8e-6b1c-4d8a-9a5e-3c1d2e4f6a7c",
            },
            VIRTIOFS,
        ],
        metadata={"user-data": "I2Nsb3VkLWNvbmZpZwo="},
        labels={"team": "a"},
    )
    template["interfaces"].append(
        {
            "deviceId": "eth2",
            "type": "Macvtap",
            "guestMac": "02:00:00:00:00:02",
            "address": {"address": "fd00::5/64", "gateway": "fd00::1", "nameservers": ["1.1.1.1"]},
            "overrides": {"bridgeName": "virbr-battery"},
        }
    )
    body["spec"]["replenishment"] = {"type": "MinSizeThreshold", "minSize": 2}
    body["spec"]["hooks"] = {"create": ["a"], "preLease": ["b"], "failurePolicy": "Quarantine"}
    body["spec"]["lease"] = {"heartbeatInterval": "1.5s", "expiryThreshold": "1m30s"}
    body["spec"]["template"]["kernel"]["cmdline"] = {"console": "ttyS0", "quiet": ""}
    body["spec"]["template"]["rootVolume"].update(
        id="root", mountPoint="/", partitionId="5f2b0c8e-6b1c-4d8a-9a5e-3c1d2e4f6a7b"
    )
    return body


@pytest.mark.controlplane
@pytest.mark.req("RS-010")
def test_a_pool_using_every_field_is_accepted(objects: Objects) -> None:
    body = every_field_pool()
    stored = objects.create(names.POOL_PLURAL, body)
    assert stored["spec"] == body["spec"]
    assert Pool.from_dict(stored).spec.lease == pool_api.LeaseSettings(
        timedelta(seconds=1.5), timedelta(seconds=90)
    )


Path = tuple[str | int, ...]


def strings(
    node: dict[str, Any], value: Any, path: Path = ()
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each string `value` holds, with its schema."""
    kind = node.get("type")
    if kind == "string" and isinstance(value, str):
        yield path, node
    elif kind == "object" and isinstance(value, dict):
        extra = node.get("additionalProperties")
        for key, item in value.items():
            sub = node.get("properties", {}).get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield from strings(sub, item, (*path, key))
    elif kind == "array" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from strings(node["items"], item, (*path, i))


def field_path(path: Path) -> str:
    """`path` as the API server names it: spec.template.interfaces[0].deviceId."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f"{'.' if out else ''}{step}"
    return out


def set_at(body: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


def bounds(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, str]]:
    """Every place under `node` that lacks a bound: (path, what is missing)."""
    kind = node.get("type")
    if kind == "string" and "maxLength" not in node and "enum" not in node:
        yield path, "maxLength"
    if kind == "array":
        if "maxItems" not in node:
            yield path, "maxItems"
        yield from bounds(node["items"], f"{path}[]")
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            if "maxProperties" not in node:
                yield path, "maxProperties"
            rules = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
            if not any("size(k)" in r for r in rules):
                yield path, "a rule bounding the keys"
            yield from bounds(extra, f"{path}.*")
        for key, sub in node.get("properties", {}).items():
            yield from bounds(sub, f"{path}.{key}" if path else key)


@pytest.mark.req("PO-106")
def test_every_string_list_and_map_a_user_writes_is_bounded() -> None:
    pool_spec = at(schema(crds.pool_crd()), "spec")
    claim_spec = at(schema(crds.claim_crd()), "spec")
    assert list(bounds(pool_spec, "spec")) == []
    assert list(bounds(claim_spec, "spec")) == []


TOO_LONG_CASES = [
    pytest.param(path, node["maxLength"], id=field_path(path))
    for path, node in strings(schema(crds.pool_crd()), every_field_pool())
    if "maxLength" in node
]


@pytest.mark.controlplane
@pytest.mark.req("PO-106")
@pytest.mark.parametrize(("path", "limit"), TOO_LONG_CASES)
def test_a_string_one_past_its_limit_is_refused_naming_the_field(
    objects: Objects, path: Path, limit: int
) -> None:
    body = set_at(every_field_pool(), path, "a" * (limit + 1))
    message = refusal(lambda: objects.create(names.POOL_PLURAL, body))
    assert f"{field_path(path)}: Too long" in message and str(limit) in message, message


LONG_KEY_CASES = [
    pytest.param(path, limit, id=".".join(path))
    for path, limit in [
        (("spec", "template", "kernel", "cmdline"), 256),
        (("spec", "template", "metadata"), 253),
        (("spec", "template", "labels"), 317),
        (("spec", "placement", "nodeSelector"), 317),
    ]
]


@pytest.mark.controlplane
@pytest.mark.req("PO-106")
@pytest.mark.parametrize(("path", "limit"), LONG_KEY_CASES)
def test_a_map_key_past_its_limit_is_refused_naming_the_map(
    objects: Objects, path: tuple[str, ...], limit: int
) -> None:
    value = "I2Nsb3VkLWNvbmZpZwo=" if path[-1] == "metadata" else "v"
    body = set_at(every_field_pool(), path, {"k" * (limit + 1): value})
    message = refusal(lambda: objects.create(names.POOL_PLURAL, body))
    assert f"{'.'.join(path)} keys must be" in message and f"at most {limit}" in message, message


@pytest.mark.controlplane
@pytest.mark.req("PO-106")
def test_lists_and_maps_past_their_limits_are_refused(objects: Objects) -> None:
    body = every_field_pool()
    body["spec"]["hooks"]["create"] = ["true"] * 33
    message = refusal(lambda: objects.create(names.POOL_PLURAL, body))
    assert "spec.hooks.create: Too many: 33: must have at most 32 items" in message, message
    body = every_field_pool()
    body["spec"]["placement"]["nodeSelector"] = {f"k{i}": "v" for i in range(65)}
    message = refusal(lambda: objects.create(names.POOL_PLURAL, body))
    assert "spec.placement.nodeSelector: Too many: 65: must have at most 64 items" in message


@pytest.mark.controlplane
@pytest.mark.req("PO-103", "PO-104", "PO-105", "PO-106")
def test_a_pool_at_every_limit_is_accepted(objects: Objects) -> None:
    body = every_field_pool()
    body["spec"]["size"] = MAX_SIZE
    body["spec"]["lease"] = {"heartbeatInterval": "1s", "expiryThreshold": "2s"}
    checked = ("pattern", "format", "x-kubernetes-validations", "enum")
    for path, node in strings(schema(crds.pool_crd()), body):
        if "maxLength" in node and not any(c in node for c in checked):
            body = set_at(body, path, "a" * node["maxLength"])
    body["spec"]["template"]["metadata"] = {"user-data": "I2Nsb3VkLWNvbmZpZwo="}
    stored = objects.create(names.POOL_PLURAL, body)
    assert stored["spec"] == body["spec"]


@pytest.mark.controlplane
@pytest.mark.req("RS-013")
def test_pool_status_is_written_through_its_subresource_only(objects: Objects) -> None:
    body = samples.sample_pool()
    body["status"] = {"available": 9}
    stored = objects.create(names.POOL_PLURAL, body)
    assert "status" not in stored  # the main resource ignores status
    now = format_time(datetime.now(UTC))
    status = {
        "observedGeneration": 1,
        "available": 3,
        "leased": 1,
        "provisioning": 0,
        "quarantined": 0,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "BelowSize",
                "message": "3 of 4",
                "lastTransitionTime": now,
            },
            {
                "type": "Exhausted",
                "status": "False",
                "reason": "Available",
                "message": "",
                "lastTransitionTime": now,
            },
        ],
    }
    written = objects.patch_status(names.POOL_PLURAL, "pool-sample", status)
    assert written["status"] == status
    assert Pool.from_dict(written).status.available == 3
    message = refusal(
        lambda: objects.patch_status(names.POOL_PLURAL, "pool-sample", {"leased": -1})
    )
    assert "status.leased" in message and "greater than or equal to 0" in message
    bad_reason = copy.deepcopy(status["conditions"])
    bad_reason[0]["reason"] = "below size"  # type: ignore[index]
    message = refusal(
        lambda: objects.patch_status(names.POOL_PLURAL, "pool-sample", {"conditions": bad_reason})
    )
    assert "status.conditions[0].reason" in message and "should match" in message
    twice = [status["conditions"][0], status["conditions"][0]]  # type: ignore[index]
    message = refusal(
        lambda: objects.patch_status(names.POOL_PLURAL, "pool-sample", {"conditions": twice})
    )
    assert "status.conditions[1]" in message and "Duplicate value" in message


@pytest.mark.controlplane
@pytest.mark.req("RS-022")
def test_pool_ref_and_service_account_cannot_change(objects: Objects) -> None:
    objects.create(names.CLAIM_PLURAL, samples.sample_claim())
    message = refusal(
        lambda: objects.patch(
            names.CLAIM_PLURAL, "claim-sample", {"spec": {"poolRef": {"name": "other"}}}
        )
    )
    assert "spec.poolRef" in message and "spec.poolRef is immutable" in message
    message = refusal(
        lambda: objects.patch(
            names.CLAIM_PLURAL, "claim-sample", {"spec": {"serviceAccountName": "mallory"}}
        )
    )
    assert "spec.serviceAccountName" in message
    assert "spec.serviceAccountName is immutable" in message
    stored = MicroVMClaim.from_dict(objects.get(names.CLAIM_PLURAL, "claim-sample"))
    assert (stored.spec.pool_name, stored.spec.service_account_name) == ("pool-sample", "sandbox")


@pytest.mark.controlplane
@pytest.mark.req("RS-023", "RS-022")
def test_the_holder_can_renew_by_setting_renew_time(objects: Objects) -> None:
    objects.create(names.CLAIM_PLURAL, samples.sample_claim())
    renew = "2026-05-01T12:00:10.123456Z"
    patched = objects.patch(names.CLAIM_PLURAL, "claim-sample", {"spec": {"renewTime": renew}})
    claim = MicroVMClaim.from_dict(patched)
    assert patched["spec"]["renewTime"] == renew
    assert claim.spec.renew_time == datetime(2026, 5, 1, 12, 0, 10, 123456, tzinfo=UTC)
    assert claim.renewal_pending


def bound_status(expires: datetime) -> dict[str, Any]:
    return {
        "phase": "Bound",
        "poolRef": {"name": "pool-sample"},
        "leaseID": "0d6f7c9e-lease",
        "microVM": {"uid": "01HVMUID"},
        "host": {"nodeName": "host-1", "agentAddress": "10.0.0.5:10270"},
        "boundTime": format_time(expires - timedelta(seconds=30)),
        "leaseExpiresAt": format_time(expires),
        "conditions": [
            {
                "type": "Bound",
                "status": "True",
                "reason": "Bound",
                "message": "Leased MicroVM 01HVMUID on Node host-1",
                "lastTransitionTime": format_time(expires - timedelta(seconds=30)),
            },
        ],
    }


@pytest.mark.controlplane
@pytest.mark.req("RS-024")
def test_claim_status_is_written_through_its_subresource_and_checked(objects: Objects) -> None:
    body = samples.sample_claim()
    body["status"] = {"phase": "Bound"}
    assert "status" not in objects.create(names.CLAIM_PLURAL, body)
    status = bound_status(datetime.now(UTC) + timedelta(hours=1))
    written = objects.patch_status(names.CLAIM_PLURAL, "claim-sample", status)
    assert written["status"] == status
    assert MicroVMClaim.from_dict(written).status.microvm_uid == "01HVMUID"
    message = refusal(
        lambda: objects.patch_status(names.CLAIM_PLURAL, "claim-sample", {"phase": "Released"})
    )
    assert "status.phase" in message and "Unsupported value" in message
    message = refusal(
        lambda: objects.patch_status(names.CLAIM_PLURAL, "claim-sample", {"microVM": {"uid": None}})
    )
    assert "status.microVM.uid: Required value" in message
    message = refusal(
        lambda: objects.patch_status(names.CLAIM_PLURAL, "claim-sample", {"leaseExpiresAt": "x"})
    )
    assert "status.leaseExpiresAt" in message and "date-time" in message


@pytest.mark.controlplane
@pytest.mark.req("RS-100", "RS-101")
def test_the_expires_column_shows_the_timestamp(objects: Objects) -> None:
    # Release notes v0.2.0 (#161): a Bound claim's expiry is in the future, which a `date`
    # column would print as "<invalid>".
    objects.create(names.CLAIM_PLURAL, samples.sample_claim())
    expires = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)
    objects.patch_status(names.CLAIM_PLURAL, "claim-sample", bound_status(expires))
    table = objects.custom.list_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        objects.namespace,
        names.CLAIM_PLURAL,
        _headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Pool", "Served-By", "Phase", "Node", "Expires", "Reason", "Age"]
    (row,) = table["rows"]
    cells = dict(zip(columns, row["cells"], strict=True))
    assert cells["Expires"] == format_time(expires)
    assert (cells["Pool"], cells["Phase"], cells["Node"]) == ("pool-sample", "Bound", "host-1")
    # The Reason column shows the Bound condition's reason, and only with `-o wide`; so does
    # Served-By, the Pool the Lease is from (RS-104).
    assert (cells["Reason"], cells["Served-By"]) == ("Bound", "pool-sample")
    priorities = {c["name"]: c.get("priority", 0) for c in table["columnDefinitions"]}
    assert (priorities["Reason"], priorities["Served-By"]) == (1, 1)


@pytest.mark.controlplane
@pytest.mark.req("RS-106")
def test_a_pool_scales_through_its_scale_subresource(
    objects: Objects, controlplane: ControlPlane
) -> None:
    objects.create(names.POOL_PLURAL, samples.sample_pool())
    selector = names.pool_selector("pool-sample")
    objects.patch_status(
        names.POOL_PLURAL, "pool-sample", {"available": 3, "replicas": 3, "selector": selector}
    )
    custom, ns = objects.custom, objects.namespace
    scale = custom.get_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, ns, names.POOL_PLURAL, "pool-sample"
    )
    size = objects.get(names.POOL_PLURAL, "pool-sample")["spec"]["size"]
    assert (scale["spec"]["replicas"], scale["status"]) == (
        size,
        {"replicas": 3, "selector": selector},
    )
    with controlplane.kubectl_env() as env:
        scaled = subprocess.run(
            ["kubectl", "scale", "pool", "pool-sample", "-n", ns, "--replicas=7"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert scaled.returncode == 0, scaled.stderr
    assert scaled.stdout == "pool.battery.liquidmetal-x.dev/pool-sample scaled\n"
    assert objects.get(names.POOL_PLURAL, "pool-sample")["spec"]["size"] == 7
    message = refusal(
        partial(
            custom.patch_namespaced_custom_object_scale,
            names.GROUP,
            names.VERSION,
            ns,
            names.POOL_PLURAL,
            "pool-sample",
            {"spec": {"replicas": -1}},
        )
    )
    assert "spec.replicas" in message or "spec.size" in message, message


@pytest.mark.controlplane
@pytest.mark.req("RS-107")
def test_autoscaling_replaces_the_size_and_each_bound_is_named(
    objects: Objects, controlplane: ControlPlane
) -> None:
    def policy(name: str, size: int | None = None, **fields: Any) -> dict[str, Any]:
        body = samples.sample_pool(name=name)
        body["spec"].pop("size")
        if size is not None:
            body["spec"]["size"] = size
        if fields:
            body["spec"]["autoscaling"] = fields
        return body

    made = objects.create(names.POOL_PLURAL, policy("auto", maxSize=10, scaleToZeroAfter="10m"))
    spec = pool_api.Pool.from_dict(made).spec
    assert spec.size is None
    assert spec.autoscaling == pool_api.Autoscaling(
        max_size=10,
        min_idle=0,
        window=timedelta(minutes=1),
        scale_to_zero_after=timedelta(minutes=10),
    )
    for body, says in (
        (policy("none"), "spec.size is required unless spec.autoscaling sizes the Pool"),
        (
            policy("both", 3, maxSize=10),
            "spec.size must not be set with spec.autoscaling: the Pool's policy sizes it",
        ),
        (policy("no-max", minIdle=1), "spec.autoscaling.maxSize: Required value"),
        (
            policy("idle-above-max", minIdle=6, maxSize=5),
            "spec.autoscaling.minIdle must be at most spec.autoscaling.maxSize",
        ),
        (policy("max-zero", maxSize=0), "spec.autoscaling.maxSize"),
        (policy("max-huge", maxSize=10_001), "spec.autoscaling.maxSize"),
        (
            policy("window-zero", maxSize=5, window="0s"),
            "spec.autoscaling.window must be a duration from 1s to 1h",
        ),
        (
            policy("window-long", maxSize=5, window="2h"),
            "spec.autoscaling.window must be a duration from 1s to 1h",
        ),
        (policy("window-bad", maxSize=5, window="soon"), "should match"),
        (
            policy("zero-long", maxSize=5, scaleToZeroAfter="25h"),
            "spec.autoscaling.scaleToZeroAfter must be a duration from 1s to 24h",
        ),
        (
            policy("zero-before-window", maxSize=5, window="2m", scaleToZeroAfter="1m"),
            "spec.autoscaling.scaleToZeroAfter must be at least spec.autoscaling.window",
        ),
        (
            policy("zero-before-default-window", maxSize=5, scaleToZeroAfter="30s"),
            "spec.autoscaling.scaleToZeroAfter must be at least spec.autoscaling.window",
        ),
    ):
        message = refusal(partial(objects.create, names.POOL_PLURAL, body))
        assert says in message, (body["metadata"]["name"], message)

    # A scale write (kubectl scale, an HPA) to a Pool its policy sizes is refused by the rule.
    with controlplane.kubectl_env() as env:
        scaled = subprocess.run(
            ["kubectl", "scale", "pool", "auto", "-n", objects.namespace, "--replicas=7"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert scaled.returncode != 0
    assert "spec.size must not be set with spec.autoscaling" in scaled.stderr, scaled.stderr
    assert "size" not in objects.get(names.POOL_PLURAL, "auto")["spec"]

    # On update: from the policy to a size, and back, each in one write; never neither.
    by_hand = objects.patch(names.POOL_PLURAL, "auto", {"spec": {"autoscaling": None, "size": 2}})
    assert "autoscaling" not in by_hand["spec"]
    again = objects.patch(
        names.POOL_PLURAL, "auto", {"spec": {"size": None, "autoscaling": {"maxSize": 4}}}
    )
    assert "size" not in again["spec"]
    message = refusal(
        partial(objects.patch, names.POOL_PLURAL, "auto", {"spec": {"autoscaling": None}})
    )
    assert "spec.size is required unless spec.autoscaling sizes the Pool" in message, message


@pytest.mark.controlplane
@pytest.mark.req("RS-101", "RS-108")
def test_pool_columns_show_size_counts_and_readiness(objects: Objects) -> None:
    objects.create(names.POOL_PLURAL, samples.sample_pool())
    objects.patch_status(
        names.POOL_PLURAL,
        "pool-sample",
        {
            "available": 4,
            "leased": 0,
            "size": 4,  # RS-108: the size battery holds
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AtSize",
                    "message": "",
                    "lastTransitionTime": format_time(datetime.now(UTC)),
                },
            ],
        },
    )
    table = objects.custom.list_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        objects.namespace,
        names.POOL_PLURAL,
        _headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    (row,) = table["rows"]
    cells = dict(zip(columns, row["cells"], strict=True))
    assert (cells["Size"], cells["Available"], cells["Leased"]) == (4, 4, 0)
    assert (cells["Ready"], cells["Reason"]) == ("True", "AtSize")
    priorities = {c["name"]: c.get("priority", 0) for c in table["columnDefinitions"]}
    assert priorities["Reason"] == 1, "Reason is a wide column"


@pytest.mark.controlplane
@pytest.mark.req("RS-102")
def test_claims_can_be_listed_by_pool_and_by_node(objects: Objects) -> None:
    for name, pool in (("a1", "pool-a"), ("a2", "pool-a"), ("b1", "pool-b")):
        objects.create(names.CLAIM_PLURAL, samples.sample_claim(name=name, pool=pool))
    objects.patch_status(
        names.CLAIM_PLURAL, "a2", bound_status(datetime.now(UTC) + timedelta(minutes=1))
    )

    def listed(selector: str) -> list[str]:
        items = objects.custom.list_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            objects.namespace,
            names.CLAIM_PLURAL,
            field_selector=selector,
        )["items"]
        return sorted(i["metadata"]["name"] for i in items)

    assert listed("spec.poolRef.name=pool-a") == ["a1", "a2"]
    assert listed("status.host.nodeName=host-1") == ["a2"]
    assert listed("status.phase=Bound,spec.poolRef.name=pool-a") == ["a2"]
    assert listed("status.poolRef.name=pool-sample") == ["a2"]  # RS-104: the serving Pool


def with_fallback(*pools: str, name: str = "claim-sample") -> dict[str, Any]:
    body = samples.sample_claim(name=name)
    body["spec"]["fallbackPoolRefs"] = [{"name": p} for p in pools]
    return body


@pytest.mark.controlplane
@pytest.mark.req("RS-103")
def test_fallback_pools_are_a_short_list_of_other_pools_each_named_once(
    objects: Objects,
) -> None:
    made = MicroVMClaim.from_dict(objects.create(names.CLAIM_PLURAL, with_fallback("b", "c")))
    assert made.spec.pool_names == ("pool-sample", "b", "c")
    message = refusal(
        lambda: objects.create(names.CLAIM_PLURAL, with_fallback("b", "pool-sample", name="x"))
    )
    assert "spec.fallbackPoolRefs" in message
    assert "spec.fallbackPoolRefs must not name spec.poolRef's Pool" in message
    message = refusal(lambda: objects.create(names.CLAIM_PLURAL, with_fallback("b", "b", name="x")))
    assert "spec.fallbackPoolRefs[1]" in message and "Duplicate value" in message
    message = refusal(
        lambda: objects.create(names.CLAIM_PLURAL, with_fallback("b", "c", "d", "e", name="x"))
    )
    assert "spec.fallbackPoolRefs" in message and "must have at most 3 items" in message
    message = refusal(
        lambda: objects.create(names.CLAIM_PLURAL, with_fallback("Not_A_Name", name="x"))
    )
    assert "spec.fallbackPoolRefs[0].name" in message and "should match" in message


@pytest.mark.controlplane
@pytest.mark.req("RS-105")
def test_wait_for_capacity_is_a_duration_from_a_second_to_a_day(objects: Objects) -> None:
    for n, good in enumerate(("1s", "90s", "1h30m", "24h")):
        body = samples.sample_claim(name=f"ok-{n}")
        body["spec"]["waitForCapacity"] = good
        made = MicroVMClaim.from_dict(objects.create(names.CLAIM_PLURAL, body))
        assert made.spec.wait_for_capacity is not None
    for bad, says in (
        ("0s", "spec.waitForCapacity must be a duration from 1s to 24h"),
        ("25h", "spec.waitForCapacity must be a duration from 1s to 24h"),
        ("-5s", "should match"),
        ("soon", "should match"),
    ):
        body = samples.sample_claim(name="bad")
        body["spec"]["waitForCapacity"] = bad
        message = refusal(partial(objects.create, names.CLAIM_PLURAL, body))
        assert "spec.waitForCapacity" in message and says in message, (bad, message)
    failed = objects.patch_status(
        names.CLAIM_PLURAL, "ok-0", {"phase": "Failed"}
    )  # CL-110's phase is one the schema takes
    assert failed["status"]["phase"] == "Failed"


@pytest.mark.controlplane
@pytest.mark.req("RS-103")
def test_fallback_pools_cannot_be_added_changed_or_removed(objects: Objects) -> None:
    objects.create(names.CLAIM_PLURAL, samples.sample_claim(name="plain"))
    message = refusal(
        lambda: objects.patch(
            names.CLAIM_PLURAL, "plain", {"spec": {"fallbackPoolRefs": [{"name": "b"}]}}
        )
    )
    assert "spec.fallbackPoolRefs is immutable" in message
    objects.create(names.CLAIM_PLURAL, with_fallback("b"))
    changes: list[Any] = [[{"name": "c"}], None]  # changed, removed
    for change in changes:
        message = refusal(
            partial(
                objects.patch,
                names.CLAIM_PLURAL,
                "claim-sample",
                {"spec": {"fallbackPoolRefs": change}},
            )
        )
        assert "spec.fallbackPoolRefs is immutable" in message
    stored = MicroVMClaim.from_dict(objects.get(names.CLAIM_PLURAL, "claim-sample"))
    assert stored.spec.fallback_pool_names == ("b",)


@pytest.mark.controlplane
@pytest.mark.req("RS-001", "RS-002")
def test_the_group_serves_pools_and_claims_and_no_microvm_kind(objects: Objects) -> None:
    resources = objects.custom.get_api_resources(names.GROUP, names.VERSION).resources
    by_name = {r.name: r for r in resources}
    assert set(by_name) == {
        names.POOL_PLURAL,
        f"{names.POOL_PLURAL}/status",
        f"{names.POOL_PLURAL}/scale",  # RS-106
        names.CLAIM_PLURAL,
        f"{names.CLAIM_PLURAL}/status",
    }
    assert {r.kind for r in resources} == {names.POOL_KIND, names.CLAIM_KIND, "Scale"}
    for plural, short in (
        (names.POOL_PLURAL, names.POOL_SHORT_NAMES),
        (names.CLAIM_PLURAL, names.CLAIM_SHORT_NAMES),
    ):
        assert by_name[plural].namespaced is True
        assert by_name[plural].short_names == list(short)
        assert by_name[plural].categories == [names.CATEGORY]
