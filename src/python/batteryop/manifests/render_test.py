"""install.yaml without an API server: its shape, its YAML, battery's config and the snapshot.

`install_test.py` applies the same objects to the real kube-apiserver and proves the RBAC there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from batteryop.api import names
from batteryop.manifests import rbac, render
from batteryop.testing.fake_battery.__main__ import load_config

IMAGE = "registry.example/battery-operator:v9.9.9"

APPLY_ORDER = [
    "Namespace",
    "CustomResourceDefinition",
    "CustomResourceDefinition",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRole",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Role",  # CT-107: the CA reader, bound to every authenticated user
    "RoleBinding",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Deployment",
    # The Exec Agent (exec_agent.py).
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DaemonSet",
    # The CSR approver (csr_approver.py).
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Deployment",
    # cert-manager's Issuers and Certificates (cert_manager.py).
    "Issuer",
    "Certificate",
    "Certificate",
    "Certificate",
    "Issuer",
    "Certificate",
]


def objects(**kwargs: Any) -> list[dict[str, Any]]:
    return render.render(operator_image=IMAGE, **kwargs)


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "Deployment", names.OPERATOR_DEPLOYMENT)["spec"]["template"][
        "spec"
    ]
    return spec


def container(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    matches = [c for c in pod(objs)["containers"] if c["name"] == name]
    assert len(matches) == 1, f"no single container {name}"
    return matches[0]


def mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in c.get("volumeMounts", [])}


def test_objects_come_in_apply_order() -> None:
    objs = objects()
    assert [o["kind"] for o in objs] == APPLY_ORDER
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"] == [
        names.POOL_CRD_NAME,
        names.CLAIM_CRD_NAME,
    ]


def test_to_yaml_round_trips_through_safe_load_all() -> None:
    objs = objects()
    text = render.to_yaml(objs)
    loaded = list(yaml.safe_load_all(text))
    assert loaded == objs
    assert text.count("\n---\n") == len(objs)  # the header comment, then one --- each


def test_every_object_has_the_common_labels() -> None:
    for obj in yaml.safe_load_all(render.to_yaml(objects())):
        got = obj["metadata"].get("labels", {})
        missing = {k: v for k, v in render.COMMON_LABELS.items() if got.get(k) != v}
        assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"


def test_the_pod_template_and_selector_carry_the_component() -> None:
    dep = one(objects(), "Deployment", names.OPERATOR_DEPLOYMENT)
    selector = dep["spec"]["selector"]["matchLabels"]
    template = dep["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template.items()
    assert template[names.COMPONENT_LABEL] == render.COMPONENT_OPERATOR


def test_every_namespaced_object_is_in_the_namespace_given() -> None:
    objs = objects(namespace="elsewhere")
    assert one(objs, "Namespace")["metadata"]["name"] == "elsewhere"
    cluster_kinds = {
        "Namespace",
        "CustomResourceDefinition",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    for obj in objs:
        if obj["kind"] not in cluster_kinds:
            assert obj["metadata"]["namespace"] == "elsewhere", obj["kind"]
        for subject in obj.get("subjects", []):
            if subject["kind"] != "Group":  # system:authenticated has no namespace
                assert subject["namespace"] == "elsewhere"


def test_render_returns_fresh_objects() -> None:
    first = objects()
    first[0]["metadata"]["name"] = "changed"
    one(first, "Deployment", names.OPERATOR_DEPLOYMENT)["spec"]["replicas"] = 7
    assert objects()[0]["metadata"]["name"] == names.OPERATOR_NAMESPACE
    assert one(objects(), "Deployment", names.OPERATOR_DEPLOYMENT)["spec"]["replicas"] == 1


@pytest.mark.req("DP-002")
def test_one_replica_replaced_with_recreate() -> None:
    spec = one(objects(), "Deployment", names.OPERATOR_DEPLOYMENT)["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


@pytest.mark.req("DP-001")
def test_the_pod_holds_operator_host_registry_and_battery_sharing_processes() -> None:
    objs = objects()
    spec = pod(objs)
    assert [c["name"] for c in spec["containers"]] == ["operator", "host-registry", "battery"]
    assert spec["shareProcessNamespace"] is True
    assert spec["serviceAccountName"] == rbac.OPERATOR_SERVICE_ACCOUNT
    assert (
        container(objs, "battery")["image"]
        == render.BATTERY_IMAGE
        == ("ghcr.io/liquidmetal-dev/poolmgrd:0.4.0")
    )
    assert container(objs, "operator")["image"] == IMAGE
    assert container(objs, "host-registry")["image"] == (
        "registry.example/battery-operator/host-registry:v9.9.9"
    )


@pytest.mark.req("DP-006")
def test_the_host_registry_runs_its_pex_beside_battery_with_its_own_ports() -> None:
    objs = objects()
    registry = container(objs, "host-registry")
    assert "command" not in registry, "the image's entrypoint runs the pex"
    args = registry["args"]
    assert f"--battery-config-file={render.CONFIG_FILE}" in args
    assert f"--battery-tls-dir={render.TLS_DIR}" in args
    assert "--battery-process-name=poolmgrd" in args
    # battery is the poolmgrd process whose -config names the file the registry watches.
    assert f"-config={render.CONFIG_FILE}" in container(objs, "battery")["args"]
    ports = {p["containerPort"] for p in registry["ports"]}
    operator_ports = {p["containerPort"] for p in container(objs, "operator")["ports"]}
    assert ports == {8082, 8083} and not ports & operator_ports
    assert registry["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.req("DP-010")
def test_the_operator_flags_and_probes() -> None:
    operator = container(objects(), "operator")
    assert operator["args"] == [
        "--battery-address=127.0.0.1:50051",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert ports == {"health": 8081, "metrics": 8080}
    assert operator["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


@pytest.mark.req("DP-001", "DP-003", "DP-004", "DP-005")
def test_battery_runs_poolmgrd_on_its_config_database_and_tls() -> None:
    objs = objects()
    battery = container(objs, "battery")
    assert battery["args"] == [
        "-config=/etc/battery/config/config.json",
        "-db=/data/poolmgr.db",
        "-log-level=info",
    ]
    assert "ports" not in battery  # loopback only: nothing to publish
    assert "readinessProbe" not in battery and "livenessProbe" not in battery
    m = mounts(battery)
    assert m[render.VOLUME_CONFIG] == {
        "name": render.VOLUME_CONFIG,
        "mountPath": "/etc/battery/config",
        "readOnly": True,
    }
    assert m[render.VOLUME_DATA]["mountPath"] == "/data"
    assert not m[render.VOLUME_DATA].get("readOnly", False)
    assert m[render.VOLUME_TLS]["mountPath"] == "/etc/battery/tls"
    assert m[render.VOLUME_TLS]["readOnly"] is True
    assert m[render.VOLUME_TMP_BATTERY]["mountPath"] == "/tmp"
    volumes = {v["name"]: v for v in pod(objs)["volumes"]}
    assert volumes[render.VOLUME_DATA]["persistentVolumeClaim"] == {
        "claimName": names.BATTERY_DATA_PVC
    }
    assert volumes[render.VOLUME_CONFIG]["configMap"]["name"] == names.BATTERY_CONFIG_MAP
    assert volumes[render.VOLUME_TMP_BATTERY]["emptyDir"]
    tls_sources = volumes[render.VOLUME_TLS]["projected"]["sources"]
    assert tls_sources[0]["secret"]["name"] == names.BATTERY_CLIENT_SECRET
    assert tls_sources[1]["configMap"]["name"] == names.CA_BUNDLE_CONFIG_MAP
    pvc = one(objs, "PersistentVolumeClaim", names.BATTERY_DATA_PVC)
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_only_the_containers_that_call_the_api_get_a_token() -> None:
    objs = objects()
    spec = pod(objs)
    assert spec["automountServiceAccountToken"] is False
    sa = one(objs, "ServiceAccount", rbac.OPERATOR_SERVICE_ACCOUNT)
    assert sa["automountServiceAccountToken"] is False
    with_token = [c["name"] for c in spec["containers"] if render.VOLUME_TOKEN in mounts(c)]
    assert with_token == ["operator", "host-registry"]
    for name in with_token:
        mount = mounts(container(objs, name))[render.VOLUME_TOKEN]
        assert mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
        assert mount["readOnly"] is True
    token = next(v for v in spec["volumes"] if v["name"] == render.VOLUME_TOKEN)
    kinds = [next(iter(s)) for s in token["projected"]["sources"]]
    assert kinds == ["serviceAccountToken", "configMap", "downwardAPI"]


def test_the_pod_and_every_container_are_locked_down_and_sized() -> None:
    spec = pod(objects())
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        for part in ("requests", "limits"):
            assert set(c["resources"][part]) == {"cpu", "memory"}, (c["name"], part)


@pytest.mark.req("DP-001", "DP-004")
def test_battery_config_is_valid_for_poolmgrd_with_the_placeholder_host(tmp_path: Path) -> None:
    cm = one(objects(), "ConfigMap", names.BATTERY_CONFIG_MAP)
    text = cm["data"]["config.json"]
    assert text == render.battery_config_text()
    raw = json.loads(text)
    assert raw["api_server"] == {"addr": "127.0.0.1:50051", "tls": {"insecure": True}}
    assert raw["metrics_addr"] == "127.0.0.1:9090"
    # The fake battery reads the file as poolmgrd v0.4.0 does (required fields, Host TLS rules).
    path = tmp_path / "config.json"
    path.write_text(text)
    settings = load_config(str(path))
    assert settings.listen == "127.0.0.1:50051"
    assert [(h.name, h.address) for h in settings.hosts] == [("_no-hosts", "no-hosts.invalid:9090")]
    assert settings.hosts[0].tls.problem() is None
    assert settings.hosts[0].tls.ca_file == "/etc/battery/tls/serving-ca.crt"


def test_host_registry_image_sits_beside_the_operator_image() -> None:
    f = render.host_registry_image_for
    assert f("ghcr.io/o/battery-operator:v1") == "ghcr.io/o/battery-operator/host-registry:v1"
    assert f("localhost:5000/op") == "localhost:5000/op/host-registry"
    assert f("localhost:5000/op:dev") == "localhost:5000/op/host-registry:dev"
    with pytest.raises(ValueError, match="digest"):
        f("ghcr.io/o/op:v1@sha256:" + "0" * 64)
    pinned = render.render(
        operator_image="ghcr.io/o/op:v1@sha256:" + "0" * 64,
        host_registry_image="ghcr.io/o/hr:v1@sha256:" + "1" * 64,
        exec_agent_image="ghcr.io/o/ea:v1@sha256:" + "2" * 64,
        csr_approver_image="ghcr.io/o/ca:v1@sha256:" + "3" * 64,
    )
    assert container(pinned, "host-registry")["image"].startswith("ghcr.io/o/hr:v1@")
    approver = one(pinned, "Deployment", names.CSR_APPROVER_NAME)
    assert approver["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "ghcr.io/o/ca:v1@"
    )
    with pytest.raises(ValueError, match="operator_image"):
        render.render(operator_image=" ")


def test_the_snapshot_is_what_render_gives() -> None:
    assert render.snapshot_text() == render.render_snapshot(), (
        "install.snapshot.yaml is stale; regenerate it with: PYTHONPATH=src/python python -c "
        "'from batteryop.manifests import render as r; import pathlib; "
        'pathlib.Path("src/python/batteryop/manifests/install.snapshot.yaml")'
        ".write_text(r.render_snapshot())'"
    )


def test_main_writes_install_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "install.yaml"
    assert render.main(["--operator-image", IMAGE, "-o", str(out)]) == 0
    assert out.read_text() == render.to_yaml(objects())
    assert render.main(["--operator-image", IMAGE, "--namespace", "x", "-o", "-"]) == 0
    assert capsys.readouterr().out == render.to_yaml(objects(namespace="x"))
    with pytest.raises(SystemExit) as exit_info:
        render.main(["--operator-image", "ghcr.io/o/op@sha256:" + "0" * 64, "-o", "-"])
    assert exit_info.value.code == 2
    assert "digest" in capsys.readouterr().err


@pytest.mark.req("DP-103")
def test_no_container_of_ours_replaces_its_images_entrypoint() -> None:
    """Our images start `/usr/bin/python3.11 /app/<name>.pex` (`release.images`); a `command`
    in the manifest would replace that entrypoint, and the images hold nothing else to run
    (install.yaml once named `/bin/host-registry` and `/bin/csr-approver`, which no image
    has). Each image is told apart by its own repository, so every one of ours is checked."""
    ours = {"op": "operator", "hr": "host registry", "ea": "exec agent", "ca": "CSR approver"}
    objs = render.render(
        operator_image="ghcr.io/o/op:v1",
        host_registry_image="ghcr.io/o/hr:v1",
        exec_agent_image="ghcr.io/o/ea:v1",
        csr_approver_image="ghcr.io/o/ca:v1",
    )
    seen = set()
    for obj in objs:
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            repo = c["image"].removeprefix("ghcr.io/o/").split(":")[0]
            if repo in ours:
                seen.add(repo)
                assert "command" not in c, f"{ours[repo]} container {c['name']} sets command"
    assert seen == set(ours), f"containers found for {sorted(seen)} only"
