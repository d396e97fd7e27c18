"""The Helm chart, with the pinned Helm (`testing.helmcli`, built from `3rdparty/go/helm`).

`helm lint --strict` passes; `helm template` with the default values gives install.yaml's
objects exactly (compared parsed, order aside); an override changes the fields it names and no
other; a bad value is refused naming its path and rule; on the real kube-apiserver `helm
install` creates every object, `helm upgrade` turns the sample Pool on, and `helm uninstall`
removes everything but the Namespace, the CRDs and battery's volume.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from batteryop.api import names, samples
from batteryop.manifests import chart, render
from batteryop.testing import certmanager, helmcli
from batteryop.testing.controlplane import ControlPlane, admin_client, install_crd
from batteryop.testing.localstack import wait_finalizer_policy

Obj = dict[str, Any]
SOURCE = "https://example.invalid/battery-operator"


@pytest.fixture(scope="module")
def helm() -> Path:
    return helmcli.ready_helm()


@pytest.fixture(scope="module")
def built() -> chart.Chart:
    return chart.build(
        app_version="v0.4.1", source=SOURCE, operator_image=render.SNAPSHOT_OPERATOR_IMAGE
    )


@pytest.fixture(scope="module")
def chart_dir(built: chart.Chart, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chart") / chart.NAME
    for path, text in built.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def install_objects() -> list[Obj]:
    return render.render(operator_image=render.SNAPSHOT_OPERATOR_IMAGE)


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {key(o): o for o in objects}
    assert len(out) == len(objects), "two objects share a kind, namespace and name"
    return out


def template(helm: Path, chart_dir: Path, *args: str) -> list[Obj]:
    proc = helmcli.run(helm, "template", "battery-operator", str(chart_dir), *args)
    assert proc.returncode == 0, proc.stderr
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


def differences(got: list[Obj], want: list[Obj]) -> list[str]:
    """Each object missing, extra or different, by kind, namespace and name."""
    a, b = by_key(got), by_key(want)
    out = [f"extra {k}" for k in a.keys() - b.keys()]
    out += [f"missing {k}" for k in b.keys() - a.keys()]
    for k in a.keys() & b.keys():
        if a[k] != b[k]:
            out.append(f"{k}: got {json.dumps(a[k], sort_keys=True)[:600]}")
    return sorted(out)


# --- without Helm ----------------------------------------------------------------------------


def test_values_yaml_holds_what_install_yaml_holds(built: chart.Chart) -> None:
    values = yaml.safe_load(built.files["values.yaml"])
    assert values == built.values
    objects = by_key(install_objects())
    deployment = objects[("Deployment", names.OPERATOR_NAMESPACE, names.OPERATOR_DEPLOYMENT)]
    pod = deployment["spec"]["template"]["spec"]
    assert values["operator"]["replicas"] == deployment["spec"]["replicas"] == 1
    assert values["operator"]["nodeSelector"] == pod["nodeSelector"]
    assert values["operator"]["tolerations"] == [] and "tolerations" not in pod
    resources = {c["name"]: c["resources"] for c in pod["containers"]}
    assert values["operator"]["resources"] == {
        chart.IMAGE_KEYS[name]: r for name, r in resources.items()
    }
    assert values["images"]["battery"] == {
        "registry": "ghcr.io",
        "repository": "liquidmetal-dev/poolmgrd",
        "tag": "0.4.0",
        "digest": "",
    }
    assert values["samples"] == {"enabled": False}
    assert built.metadata["version"] == "0.4.1" and built.metadata["appVersion"] == "v0.4.1"


def test_an_image_splits_into_registry_repository_tag_and_digest() -> None:
    digest = "sha256:" + "0" * 64
    assert chart.split_image(f"registry.example:5000/a/b:v1@{digest}") == {
        "registry": "registry.example:5000",
        "repository": "a/b",
        "tag": "v1",
        "digest": digest,
    }
    with pytest.raises(ValueError, match="no tag"):
        chart.split_image("ghcr.io/a/b")
    with pytest.raises(ValueError, match="no registry"):
        chart.split_image("a/b:v1")


def test_a_chart_version_is_the_release_tag_as_semver() -> None:
    assert chart.chart_version("v0.5.1-dev3.gabc1234-dirty") == "0.5.1-dev3.gabc1234-dirty"
    with pytest.raises(ValueError, match="SemVer"):
        chart.chart_version("v0.5")


def test_the_docs_values_table_is_the_charts() -> None:
    page = Path("docs/install.md")  # a dependency of this test (//:docs-site, BUILD)
    built = chart.build(
        app_version="v0.4.1", source=chart.SOURCE, operator_image=render.SNAPSHOT_OPERATOR_IMAGE
    )
    assert chart.values_table(built) in page.read_text(encoding="utf-8"), (
        "docs/install.md's values table is stale: "
        "`python -m batteryop.manifests.chart --values-table` prints it"
    )


# --- with the pinned Helm --------------------------------------------------------------------


@pytest.mark.req("DP-112")
def test_helm_lint_strict_is_clean(helm: Path, chart_dir: Path) -> None:
    proc = helmcli.run(helm, "lint", "--strict", str(chart_dir))
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.req("DP-112")
def test_helm_template_with_default_values_gives_install_yaml(helm: Path, chart_dir: Path) -> None:
    got = template(helm, chart_dir)
    assert differences(got, install_objects()) == []
    assert len(got) == len(install_objects())


def overridden() -> tuple[Obj, list[Obj]]:
    """Values changing one thing of each kind, and install.yaml's objects changed by hand
    exactly there."""
    mirror = "registry.example:5000/mirror"
    tolerations = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    issuer = {"name": "corporate-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    values: Obj = {
        "imageRegistry": mirror,
        "operator": {"replicas": 0, "resources": {"battery": resources}},
        "csrApprover": {"nodeSelector": {"pool": "infra"}, "tolerations": tolerations},
        "certManager": {"caIssuerRef": issuer, "selfSignedIssuer": {"create": False}},
        "samples": {"enabled": True},
    }
    want = []
    for obj in install_objects():
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Issuer" and name == names.SELFSIGNED_ISSUER:
            continue
        if kind == "Certificate" and obj["spec"].get("isCA"):
            obj["spec"]["issuerRef"] = issuer
        if kind in ("Deployment", "DaemonSet"):
            pod = obj["spec"]["template"]["spec"]
            for container in pod["containers"]:
                container["image"] = mirror + container["image"].removeprefix("ghcr.io")
                if container["name"] == render.BATTERY_CONTAINER:
                    container["resources"] = resources
            if name == names.OPERATOR_DEPLOYMENT:
                obj["spec"]["replicas"] = 0
            if name == names.CSR_APPROVER_NAME:
                pod["nodeSelector"]["pool"] = "infra"  # Helm merges a map into the default
                pod["tolerations"] = tolerations
        want.append(obj)
    pool = samples.sample_pool()
    pool["metadata"]["namespace"] = "default"
    return values, [*want, pool]


@pytest.mark.req("DP-112")
def test_an_override_lands_where_it_should_and_nowhere_else(
    helm: Path, chart_dir: Path, tmp_path: Path
) -> None:
    values, want = overridden()
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    got = template(helm, chart_dir, "--namespace", "default", "-f", str(tmp_path / "values.yaml"))
    assert differences(got, want) == []


BAD = {
    "two-operators": (["--set", "operator.replicas=2"], "at '/operator/replicas': maximum"),
    "short-digest": (
        ["--set", "images.operator.digest=sha256:abc"],
        "at '/images/operator/digest': 'sha256:abc' does not match pattern",
    ),
    "unknown-key": (["--set", "operatr.replicas=1"], "additional properties 'operatr'"),
    "no-limits": (
        ["--set", "execAgent.resources.limits=null"],
        "at '/execAgent/resources': missing property 'limits'",
    ),
    "not-a-quantity": (
        ["--set", "operator.resources.battery.limits.memory=lots"],
        "at '/operator/resources/battery/limits/memory': 'lots' does not match pattern",
    ),
    "agent-off-hosts": (
        ["--set-json", f'execAgent.nodeSelector={{"{names.HOST_LABEL}":null}}'],
        f"at '/execAgent/nodeSelector': missing property '{names.HOST_LABEL}'",
    ),
    "agent-without-host-toleration": (
        ["--set-json", "execAgent.tolerations=[]"],
        "at '/execAgent/tolerations'",
    ),
    "issuer-kind": (
        ["--set", "certManager.caIssuerRef.kind=Vault"],
        "at '/certManager/caIssuerRef/kind'",
    ),
}


@pytest.mark.req("DP-114")
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_is_refused_naming_its_path_and_rule(
    helm: Path, chart_dir: Path, case: str
) -> None:
    args, message = BAD[case]
    proc = helmcli.run(helm, "template", "battery-operator", str(chart_dir), *args)
    print(proc.stderr)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr


# --- on the real kube-apiserver ----------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    try:
        certmanager.install_crds(api)  # cert-manager first, as docs/install.md asks
        yield api
    finally:
        api.close()


def exists(dyn: DynamicClient, obj: Obj) -> bool:
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        found = resource.get(
            name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
        )
    except NotFoundError:
        return False
    return found.metadata.deletionTimestamp is None


@pytest.mark.controlplane
@pytest.mark.req("DP-112", "DP-113")
def test_install_upgrade_and_uninstall_on_the_api_server(
    helm: Path, chart_dir: Path, controlplane: ControlPlane, admin: k8s.ApiClient
) -> None:
    def helm_run(*args: str) -> str:
        proc = helmcli.run(
            helm, *args, "--namespace", "default", kubeconfig=controlplane.admin_kubeconfig
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    dyn = DynamicClient(admin)
    objects = install_objects()
    helm_run("install", "battery-operator", str(chart_dir))
    missing = [key(o) for o in objects if not exists(dyn, o)]
    assert missing == []

    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        install_crd(admin, crd)  # already made by Helm: waits until it is Established
    # Right after a CRD is made, the API server's finalizer policy refuses its kind for a
    # moment ("Resource kind ... not found"): wait until it admits claims, as a user enabling
    # the samples after the install would find it.
    wait_finalizer_policy(admin, active=True)
    pool = samples.sample_pool()
    pool["metadata"]["namespace"] = "default"
    assert not exists(dyn, pool)
    helm_run("upgrade", "battery-operator", str(chart_dir), "--reuse-values", "--set",
             "samples.enabled=true")  # fmt: skip
    assert exists(dyn, pool)
    helm_run("upgrade", "battery-operator", str(chart_dir), "--reuse-values", "--set",
             "samples.enabled=false")  # fmt: skip

    helm_run("uninstall", "battery-operator")
    kept = {key(o) for o in objects if o["metadata"].get("annotations", {}) == render.KEPT}
    crds = {key(o) for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert len(crds) == 2 and kept == {
        ("Namespace", "", names.OPERATOR_NAMESPACE),
        *crds,
        ("PersistentVolumeClaim", names.OPERATOR_NAMESPACE, names.BATTERY_DATA_PVC),
    }
    left = {key(o) for o in objects if exists(dyn, o)}
    assert left == kept
    assert not exists(dyn, pool)  # it went with the upgrade that turned the samples off
