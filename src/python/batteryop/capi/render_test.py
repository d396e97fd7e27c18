"""The Host pool templates: the renderer and kustomize agree, and the real API server, with
Cluster API's and CAPA's own CRDs, accepts what they render.

The CRDs come from the module zips of the releases pinned in 3rdparty/go/capi (checked
against go.sum by `go mod download`), installed into the test control plane; every example
pool is applied with a server-side dry run, so the OpenAPI and CEL rules of the real CRDs
judge it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from batteryop.capi.__main__ import main
from batteryop.capi.render import Templates, find_root, load_settings, render
from batteryop.release.gomodules import download, find_pins
from batteryop.testing.controlplane.server import ControlPlane

ROOT = find_root()
POOLS = sorted(p.name for p in (ROOT / "pools").iterdir() if (p / "host-pool.yaml").is_file())
CRDS = {
    "sigs.k8s.io/cluster-api": [
        "config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml",
        "config/crd/bases/cluster.x-k8s.io_machinehealthchecks.yaml",
        "bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
    ],
    "sigs.k8s.io/cluster-api-provider-aws/v2": [
        "config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachinetemplates.yaml",
    ],
}


def rendered(pool: str) -> list[dict[str, Any]]:
    templates = Templates.load(ROOT)
    return render(load_settings(ROOT / "pools" / pool / "host-pool.yaml", templates), templates)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_there_is_an_amd64_and_an_arm64_example() -> None:
    assert {"amd64-example", "arm64-example"} <= set(POOLS)
    arm = by_kind(rendered("arm64-example"))["AWSMachineTemplate"]
    assert arm["spec"]["template"]["spec"]["instanceType"].endswith(".metal")  # HP-100


@pytest.mark.req("HP-001", "HP-002")
@pytest.mark.parametrize("pool", POOLS)
def test_the_renderer_and_kustomize_give_the_same_objects(pool: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "pools" / pool)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    from_kustomize = by_kind(list(yaml.safe_load_all(out.stdout)))
    mine = by_kind(rendered(pool))
    assert set(mine) == {
        "MachineDeployment",
        "AWSMachineTemplate",
        "KubeadmConfigTemplate",
        "MachineHealthCheck",
    }
    assert mine == from_kustomize


@pytest.mark.req("HP-001", "HP-005", "HP-006", "HP-010", "HP-020", "HP-021", "HP-030", "HP-031")
def test_a_rendered_pool_carries_the_settings_where_cluster_api_reads_them() -> None:
    objects = by_kind(rendered("amd64-example"))
    deployment = objects["MachineDeployment"]["spec"]
    machine = objects["AWSMachineTemplate"]["spec"]["template"]["spec"]
    kubeadm = objects["KubeadmConfigTemplate"]["spec"]["template"]["spec"]
    health = objects["MachineHealthCheck"]["spec"]
    assert deployment["replicas"] == 2
    assert deployment["template"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"] == 4500
    assert deployment["template"]["spec"]["infrastructureRef"]["name"] == "hosts-amd64"
    assert machine["instanceType"] == "m6id.metal"
    assert machine["ami"] == {"id": "ami-0123456789abcdef0"}
    assert machine["subnet"] == {"id": "subnet-0123456789abcdef0"}
    assert machine["additionalSecurityGroups"] == [{"id": "sg-0123456789abcdef0"}]
    assert "iamInstanceProfile" not in machine
    assert machine["sshKeyName"] == ""
    assert machine["cloudInit"] == {"insecureSkipSecretsManager": True}
    assert machine["instanceMetadataOptions"]["httpTokens"] == "required"
    assert machine["instanceMetadataOptions"]["httpPutResponseHopLimit"] == 1
    (conf,) = kubeadm["files"]
    assert conf["path"] == "/etc/battery/host.conf"
    assert "FLINTLOCKD_CLIENT_CIDRS=10.244.0.0/16" in conf["content"]
    registration = kubeadm["joinConfiguration"]["nodeRegistration"]
    assert {"name": "node-labels", "value": "battery.liquidmetal-x.dev/host=true"} in registration[
        "kubeletExtraArgs"
    ]
    assert registration["taints"] == [
        {"key": "battery.liquidmetal-x.dev/host", "value": "true", "effect": "NoSchedule"}
    ]
    assert [c["timeoutSeconds"] for c in health["checks"]["unhealthyNodeConditions"]] == [600, 600]
    assert health["selector"] == deployment["selector"]


def test_the_command_prints_the_objects_or_one_line_naming_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = ROOT / "pools" / "amd64-example" / "host-pool.yaml"
    assert main([str(settings), "--templates", str(ROOT)]) == 0
    assert len(list(yaml.safe_load_all(capsys.readouterr().out))) == 4
    bad = tmp_path / "host-pool.yaml"
    bad.write_text(settings.read_text().replace("m6id.metal", "m6id.32xlarge"))
    assert main([str(bad), "--templates", str(ROOT)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "python -m batteryop.capi: host pool setting instanceType: "
        "m6id.32xlarge is not a bare-metal (.metal) size"
    ]


@pytest.fixture(scope="module")
def _capi_crds(controlplane: ControlPlane) -> None:
    """Cluster API's and CAPA's CRDs, from their pinned module zips, in the control plane."""
    dirs = download(find_pins(Path("3rdparty/go/capi")), CRDS)
    files = [str(dirs[module] / path) for module, paths in CRDS.items() for path in paths]
    with controlplane.kubectl_env() as env:
        for args in (
            ["apply", "--server-side", *(f"-f={f}" for f in files)],
            ["wait", "--for=condition=Established", "--timeout=60s", *(f"-f={f}" for f in files)],
        ):
            subprocess.run(
                ["kubectl", *args], env=env, check=True, capture_output=True, timeout=120
            )


def dry_run(
    controlplane: ControlPlane, namespace: str, objects: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    with controlplane.kubectl_env() as env:
        return subprocess.run(
            ["kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", "-"],
            input=yaml.safe_dump_all(objects),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.mark.controlplane
@pytest.mark.usefixtures("_capi_crds")
@pytest.mark.req("HP-001", "HP-005", "HP-031")
@pytest.mark.parametrize("pool", POOLS)
def test_the_api_server_with_cluster_apis_crds_accepts_every_example(
    controlplane: ControlPlane, namespace: str, pool: str
) -> None:
    done = dry_run(controlplane, namespace, rendered(pool))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == 4, done.stdout


@pytest.mark.controlplane
@pytest.mark.usefixtures("_capi_crds")
def test_the_crds_judge_for_real_a_field_they_forbid_is_refused(
    controlplane: ControlPlane, namespace: str
) -> None:
    """The control for the test above: the dry run is not a rubber stamp."""
    objects = rendered("amd64-example")
    machine = by_kind(objects)["AWSMachineTemplate"]["spec"]["template"]["spec"]
    machine["instanceMetadataOptions"]["httpPutResponseHopLimit"] = 0
    done = dry_run(controlplane, namespace, objects)
    assert done.returncode != 0
    assert "httpPutResponseHopLimit" in done.stderr
