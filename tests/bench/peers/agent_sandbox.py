"""The peer: kubernetes-sigs/agent-sandbox's controller, built and run beside the test control
plane, and its side of the claim workload.

Its source is a tarball of the shared third-party folder (`TARBALL`, commit 2fd412d5; no
registry serves it): checked against its sha256, unpacked, and `./cmd/agent-sandbox-controller`
built with the machine's Go (`CGO_ENABLED=0`, `-trimpath -s -w`, its modules from the Go module
proxy checked against its go.sum), once per tarball (`third_party.built_once`). Its manifests
(`k8s/`) are kept beside the binary. Nothing of it is copied into this repository.

It runs as a process of its own, as its ServiceAccount (a TokenRequest token in a kubeconfig)
so its own RBAC applies, with its extensions on (SandboxTemplate, SandboxWarmPool and
SandboxClaim). Of its manifests, every object but the controller's Deployment and Services is
applied; the four CRDs get `conversion: None` and the controller `--enable-webhook=false`
(only their storage version, v1beta1, is used, so no conversion webhook is needed).

The workload's side: a SandboxTemplate of one container, a SandboxWarmPool of it, and
SandboxClaims on that pool; a claim counts as ready when its `Ready` condition is `True`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from bench.peers.cluster import FAKE_NODE_LABEL, Daemon, DaemonError
from bench.workload import Resource
from kubernetes import client as k8s
from kubernetes import utils

from batteryop.release.gomodules import GoModuleError, build
from batteryop.release.third_party import Tarball, ThirdPartyError, built_once
from batteryop.testing.controlplane import ControlPlane, admin_client, request_token
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.processes import http_get

TARBALL: Final = Tarball(
    "agent-sandbox-2fd412d5.tar.gz",
    "03d6bcf639d68a5b3234f4daf6ca06e6d8f64a9fe95eca507d1ab0be8ccb274d",
)
PACKAGE: Final = "./cmd/agent-sandbox-controller"
MANIFESTS: Final = (
    "controller.yaml",
    "rbac.generated.yaml",
    "extensions.yaml",
    "extensions-rbac.generated.yaml",
    "crds/agents.x-k8s.io_sandboxes.yaml",
    "crds/extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "crds/extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
)
"""What a platform team applies for the controller with its extensions (under `k8s/`)."""
NAMESPACE: Final = "agent-sandbox-system"
SERVICE_ACCOUNT: Final = "agent-sandbox-controller"
GROUP: Final = "extensions.agents.x-k8s.io"
VERSION: Final = "v1beta1"
CLAIMS: Final = Resource(GROUP, VERSION, "sandboxclaims")
WARM_POOLS: Final = Resource(GROUP, VERSION, "sandboxwarmpools")
TEMPLATES: Final = Resource(GROUP, VERSION, "sandboxtemplates")

COMMON_FLAGS: Final = ("--extensions", "--enable-webhook=false", "--leader-elect=false")
"""How it runs here, in both settings."""
SETTINGS: Final[Mapping[str, tuple[str, ...]]] = {
    "default": (),
    # The peer's own performance-tuning guide.
    "tuned": (
        "--sandbox-warm-pool-replenish-delay=5s",
        "--disable-claim-events",
        "--disable-claim-observability-annotations",
    ),
}


class PeerError(RuntimeError):
    """The peer's source is missing or altered, it did not build, or it did not start."""


def ensure() -> Path:
    """The folder holding the built controller (`agent-sandbox-controller`) and its manifests
    (`k8s/`), built first if this tarball never was."""

    def build_controller(tree: Path, out: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        try:
            build(
                tree,
                PACKAGE,
                out / "agent-sandbox-controller",
                flags=("-trimpath", "-ldflags=-s -w"),
                env=env,
                timeout=1800,
            )
        except GoModuleError as err:
            raise ThirdPartyError(str(err)) from err
        (tree / "k8s").rename(out / "k8s")

    return built_once("agent-sandbox", TARBALL, build_controller, error=PeerError)


def manifest_objects(k8s_dir: Path) -> list[dict[str, Any]]:
    """The objects of `MANIFESTS` to apply: without the controller's Deployment and Services
    (it runs as a process here), each CRD's conversion set to `None`."""
    objects = []
    for name in MANIFESTS:
        for obj in yaml.safe_load_all((k8s_dir / name).read_text()):
            if not obj or obj["kind"] in ("Deployment", "Service"):
                continue
            if obj["kind"] == "CustomResourceDefinition":
                obj["spec"]["conversion"] = {"strategy": "None"}
            objects.append(obj)
    return objects


def install(cp: ControlPlane, k8s_dir: Path) -> None:
    """Apply `manifest_objects` (those already there are left as they are)."""
    api = admin_client(cp)
    try:
        for obj in manifest_objects(k8s_dir):
            try:
                utils.create_from_dict(api, obj)
            except utils.FailToCreateError as e:
                if any(x.status != 409 for x in e.api_exceptions):
                    raise
        _wait_served(api)
    finally:
        api.close()


def _wait_served(api: k8s.ApiClient, timeout: float = 30) -> None:
    """Until the API server serves the extensions' resources (CRDs take a moment)."""
    custom = k8s.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    for r in (CLAIMS, WARM_POOLS, TEMPLATES):
        while True:
            try:
                custom.list_cluster_custom_object(r.group, r.version, r.plural, limit=1)
                break
            except k8s.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@contextlib.contextmanager
def controller(
    cp: ControlPlane, folder: Path, setting: str, work: Path, timeout: float = 60
) -> Iterator[Daemon]:
    """The controller with `SETTINGS[setting]`, as its ServiceAccount, until the context ends;
    ready once it answers its readiness probe."""
    api = admin_client(cp)
    try:
        token = request_token(api, NAMESPACE, SERVICE_ACCOUNT, seconds=3600)
    finally:
        api.close()
    kubeconfig = cp.write_kubeconfig(work / f"peer-{setting}.kubeconfig", token=token)
    probe = free_port()
    argv = [
        str(folder / "agent-sandbox-controller"),
        *COMMON_FLAGS,
        *SETTINGS[setting],
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    with Daemon.run(f"agent-sandbox-{setting}", argv, work, env) as peer:
        deadline = time.monotonic() + timeout
        while True:
            peer.check()
            with contextlib.suppress(OSError):
                if http_get(f"http://127.0.0.1:{probe}/readyz")[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise DaemonError(f"{peer.name} was not ready in {timeout} s")
            time.sleep(0.1)
        yield peer


def template(name: str) -> dict[str, Any]:
    """A SandboxTemplate of one container, its Pods on the fake Nodes."""
    label, kind = FAKE_NODE_LABEL
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "spec": {
                    "nodeSelector": {label: kind},
                    "containers": [
                        {"name": "sandbox", "image": "busybox", "command": ["sleep", "infinity"]}
                    ],
                }
            }
        },
    }


def warm_pool(name: str, template_name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template_name}},
    }


def claim(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    }


def is_ready(obj: Mapping[str, Any]) -> bool:
    """A SandboxClaim (or anything with conditions) whose `Ready` condition is `True`."""
    conditions: Sequence[Mapping[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def create_claim(custom: k8s.CustomObjectsApi, namespace: str, name: str, pool: str) -> float:
    """Create SandboxClaim `name` on `pool`; the moment its create was sent."""
    body = claim(name, pool)
    sent = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, CLAIMS.plural, body)
    return sent


def make_pool(custom: k8s.CustomObjectsApi, namespace: str, name: str, replicas: int) -> None:
    """A SandboxTemplate and a SandboxWarmPool of `replicas` of it, both named `name`."""
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, TEMPLATES.plural, template(name)
    )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, WARM_POOLS.plural, warm_pool(name, name, replicas)
    )


def wait_pool_ready(
    custom: k8s.CustomObjectsApi, namespace: str, name: str, replicas: int, timeout: float = 300
) -> None:
    """Until the SandboxWarmPool reports `replicas` ready (its Sandboxes' Pods Ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body: Any = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, WARM_POOLS.plural, name
        )
        if (body.get("status") or {}).get("readyReplicas", 0) >= replicas:
            return
        time.sleep(0.2)
    raise AssertionError(f"SandboxWarmPool {name} never had {replicas} ready replicas")
