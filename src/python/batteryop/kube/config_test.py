"""KubeConfig: kubeconfig files and the in-cluster mount, against the real
kube-apiserver."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import KubeConfigError, UnauthorizedError
from batteryop.kube.resources import CONFIGMAPS, Resource
from batteryop.testing.controlplane import ControlPlane, ensure_service_account, request_token

pytestmark = pytest.mark.controlplane


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", False)


async def username(client: KubeClient) -> str:
    """The user name the API server sees for the client (a SelfSubjectReview)."""
    review = await client.create(
        SELF_SUBJECT_REVIEWS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


async def whoami(config: KubeConfig) -> str:
    async with KubeClient(config) as client:
        return await username(client)


# -- kubeconfig files --------------------------------------------------------------------------


async def test_a_kubeconfig_written_by_the_control_plane_logs_in(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    pair = controlplane.client_cert("alice", ["devs"])
    path = controlplane.write_kubeconfig(tmp_path / "kubeconfig", client=pair)

    config = KubeConfig.from_kubeconfig(str(path))

    assert config.server == controlplane.url
    assert config.ca_data == controlplane.ca.cert_pem
    assert (config.cert_data, config.key_data) == (pair.cert_pem, pair.key_pem)
    assert config.token is None and config.token_file is None and not config.insecure
    assert await whoami(config) == "alice"


@pytest.mark.parametrize("memfd", [True, False])
async def test_a_client_key_logs_in_and_never_lands_on_a_file_system_where_memfd_is(
    controlplane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    memfd: bool,
) -> None:
    """On Linux the client certificate and key go to `ssl` through anonymous memory files,
    so no temporary directory is made; without `memfd_create` a private one holds them and is
    gone after."""
    import tempfile

    made: list[str] = []
    real = tempfile.TemporaryDirectory

    def recorded(*args: Any, **kwargs: Any) -> tempfile.TemporaryDirectory[str]:
        directory = real(*args, **kwargs)
        made.append(directory.name)
        return directory

    monkeypatch.setattr(tempfile, "TemporaryDirectory", recorded)
    if not memfd:
        monkeypatch.delattr(os, "memfd_create")
    pair = controlplane.client_cert("carol", ["devs"])
    config = KubeConfig.from_kubeconfig(
        str(controlplane.write_kubeconfig(tmp_path / "kubeconfig", client=pair))
    )
    assert await whoami(config) == "carol"
    assert len(made) == (0 if memfd else 1)
    assert not any(Path(d).exists() for d in made)


async def test_kubeconfig_paths_are_relative_to_the_file_and_token_files_are_read(
    controlplane: ControlPlane, kube_admin: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    ensure_service_account(kube_admin, namespace, "robot")
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(controlplane.ca.cert_pem)
    (tmp_path / "token").write_text(request_token(kube_admin, namespace, "robot") + "\n")
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": controlplane.url, "certificate-authority": "pki/ca.crt"},
            }
        ],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(kubeconfig))

    config = KubeConfig.from_kubeconfig(str(path))

    assert config.ca_data == controlplane.ca.cert_pem
    assert config.token_file == str(tmp_path / "token")
    assert await whoami(config) == f"system:serviceaccount:{namespace}:robot"


@pytest.mark.req("CC-112")
def test_kubeconfig_lists_merge_with_the_first_file_winning(
    controlplane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = controlplane.kubeconfig(token="first-token")
    second = controlplane.kubeconfig(token="second-token")
    second["clusters"][0]["name"] = "other"
    second["clusters"][0]["cluster"]["server"] = "https://other.example:6443"
    second["contexts"] = [{"name": "other", "context": {"cluster": "other", "user": "user"}}]
    second["current-context"] = "other"
    (tmp_path / "a").write_text(json.dumps(first))
    (tmp_path / "b").write_text(json.dumps(second))
    files = [str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "b")]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(files))

    current = KubeConfig.from_kubeconfig()
    assert (current.server, current.token) == (controlplane.url, "first-token")
    other = KubeConfig.from_kubeconfig(context="other")
    # The context and cluster come from the second file, the user "user" from the first.
    assert (other.server, other.token) == ("https://other.example:6443", "first-token")
    # CC-112: the same list given as the path (the `battery --kubeconfig` value) merges alike.
    listed = KubeConfig.from_kubeconfig(os.pathsep.join(files))
    assert (listed.server, listed.token) == (controlplane.url, "first-token")


def test_without_kubeconfig_set_the_home_file_is_read(
    controlplane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    controlplane.write_kubeconfig(tmp_path / ".kube" / "config", token="t")

    config = KubeConfig.load()

    assert (config.server, config.token) == (controlplane.url, "t")


@pytest.mark.parametrize(
    ("user", "problem"),
    [
        ({"exec": {"command": "aws"}}, "exec plugin 'aws': apiVersion '\\(none\\)'"),
        ({"auth-provider": {"name": "oidc"}}, "auth-provider is not supported"),
        ({"client-certificate-data": "not base64!"}, "not base64"),
    ],
)
def test_unusable_users_are_refused(
    controlplane: ControlPlane, user: dict[str, object], problem: str
) -> None:
    kubeconfig = controlplane.kubeconfig()
    kubeconfig["users"][0]["user"] = user
    with pytest.raises(KubeConfigError, match=problem):
        KubeConfig.from_dict(kubeconfig)


def test_an_unknown_context_is_refused(controlplane: ControlPlane) -> None:
    with pytest.raises(KubeConfigError, match="no context named 'nope'"):
        KubeConfig.from_dict(controlplane.kubeconfig(), context="nope")


def test_a_kubeconfig_in_yaml_s_own_syntax_reads_as_pyyaml_s_safe_load_reads_it(
    tmp_path: Path,
) -> None:
    """The file is parsed by libyaml when PyYAML has it: comments, anchors and aliases, flow
    and block styles, quoted and block scalars read as `yaml.safe_load` reads them; a file
    that is not YAML is refused naming it."""
    text = (
        "# written by hand\n"
        "apiVersion: v1\nkind: Config\ncurrent-context: 'ctx'\n"
        'clusters:\n- name: c\n  cluster: &cluster {server: "https://127.0.0.1:1"}\n'
        "- name: copy\n  cluster: *cluster\n"
        "users:\n- name: u\n  user:\n    token: >-\n      secret-token\n"
        "contexts: [{name: ctx, context: {cluster: copy, user: u}}]\n"
    )
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    config = KubeConfig.from_kubeconfig(str(path))
    assert (config.server, config.token) == ("https://127.0.0.1:1", "secret-token")
    assert config == KubeConfig.from_dict(yaml.safe_load(text), base_dir=str(tmp_path))

    path.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeConfigError, match="not YAML"):
        KubeConfig.from_kubeconfig(str(path))


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="cannot read it"):
        KubeConfig.from_kubeconfig(str(tmp_path / "none"))


def test_a_certificate_needs_its_key_and_secrets_stay_out_of_repr() -> None:
    with pytest.raises(KubeConfigError, match="needs its key"):
        KubeConfig(server="https://k", ca_data=None, cert_data=b"cert")
    config = KubeConfig(
        server="https://k", ca_data=None, token="s3cret", cert_data=b"c", key_data=b"k"
    )
    assert "s3cret" not in repr(config)
    assert "key_data" not in repr(config)


# -- in cluster --------------------------------------------------------------------------------


@pytest.fixture
def mount(
    controlplane: ControlPlane,
    kube_admin: k8s.ApiClient,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """A ServiceAccount mount (ca.crt, token) for `robot` and the Pod's environment."""
    ensure_service_account(kube_admin, namespace, "robot")
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    (mount / "ca.crt").write_bytes(controlplane.ca.cert_pem)
    (mount / "token").write_text(request_token(kube_admin, namespace, "robot"))
    host, port = controlplane.host.rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setattr("batteryop.kube.config.SERVICE_ACCOUNT_DIR", str(mount))
    return mount


async def test_in_a_pod_the_service_account_mount_is_used_and_the_token_reread(
    mount: Path, kube_admin: k8s.ApiClient, namespace: str
) -> None:
    config = KubeConfig.load()
    assert config.token_file == str(mount / "token")
    assert config.token is None

    robot = f"system:serviceaccount:{namespace}:robot"
    async with KubeClient(config) as client:
        assert await username(client) == robot
        # The kubelet rotates the projected token by rewriting the file: the same client
        # sends whatever the file holds now.
        (mount / "token").write_text("expired-or-garbage")
        with pytest.raises(UnauthorizedError):
            await client.list(CONFIGMAPS, namespace)
        (mount / "token").write_text(request_token(kube_admin, namespace, "robot"))
        assert await username(client) == robot

        (mount / "token").unlink()
        with pytest.raises(UnauthorizedError, match="cannot read the token"):
            await client.list(CONFIGMAPS, namespace)


def test_in_cluster_needs_the_pod_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        KubeConfig.in_cluster(service_account_dir=str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    with pytest.raises(KubeConfigError, match="no ServiceAccount token"):
        KubeConfig.in_cluster(service_account_dir=str(tmp_path))
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(b"ca")
    assert (
        KubeConfig.in_cluster(service_account_dir=str(tmp_path)).server == "https://[fd00::1]:443"
    )
