"""A kubeconfig is enough (CC-114, CT-107): the client reads the Exec Agent serving CA the
release publishes, as a consumer with no right in the operator's namespace but install.yaml's
CA reader Role, against the real API server; and says what it tried when it cannot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from batteryop.api import names
from batteryop.client import AsyncClient, ConfigError
from batteryop.client._ca import CaLookup, published_ca
from batteryop.kube.config import KubeConfig
from batteryop.manifests import rbac
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.controlplane.clients import (
    admin_client,
    await_access,
    ensure_service_account,
    request_token,
    token_client,
)
from batteryop.tls import CertificateAuthority

pytestmark = pytest.mark.controlplane
NS = names.OPERATOR_NAMESPACE
PEM = CertificateAuthority.create("exec-agent-serving-ca").pair.cert_pem


@pytest.fixture(scope="module")
def admin(controlplane: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = admin_client(controlplane)
    core = k8s.CoreV1Api(api)
    with contextlib.suppress(k8s.ApiException):
        core.create_namespace({"metadata": {"name": NS}})
    yield api
    api.close()


def consumer(controlplane: ControlPlane, admin: k8s.ApiClient, namespace: str) -> AsyncClient:
    """A client as a consumer: a ServiceAccount of another namespace, with no Role at all."""
    ensure_service_account(admin, namespace, "consumer")
    token = request_token(admin, namespace, "consumer")
    config = KubeConfig.from_dict(controlplane.kubeconfig(token=token))
    return AsyncClient(namespace=namespace, kube_config=config)


def publish(admin: k8s.ApiClient, data: dict[str, str]) -> None:
    core = k8s.CoreV1Api(admin)
    body = {"metadata": {"name": names.CA_BUNDLE_CONFIG_MAP}, "data": data}
    try:
        core.replace_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS, body)
    except k8s.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(NS, body)


def ca_reader(admin: k8s.ApiClient, *, present: bool) -> None:
    """install.yaml's CA reader Role and RoleBinding (CT-107), made or removed."""
    api = k8s.RbacAuthorizationV1Api(admin)
    for obj in rbac.objects(namespace=NS, labels={}):
        if obj["metadata"]["name"] != names.CA_READER_ROLE:
            continue
        kind = "role" if obj["kind"] == "Role" else "role_binding"
        try:
            if present:
                getattr(api, f"create_namespaced_{kind}")(NS, obj)
            else:
                getattr(api, f"delete_namespaced_{kind}")(names.CA_READER_ROLE, NS)
        except k8s.ApiException as e:
            if e.status != (409 if present else 404):
                raise
    # Any authenticated user, as the RoleBinding's subject is that group.
    await_access(
        admin,
        user="system:serviceaccount:ca-test:probe",
        groups=[names.AUTHENTICATED_GROUP],
        namespace=NS,
        verb="get",
        resource="configmaps",
        name=names.CA_BUNDLE_CONFIG_MAP,
        allowed=present,
    )


@pytest.mark.req("CC-114", "CT-107")
async def test_a_consumer_finds_the_published_ca_with_its_kubeconfig_alone(
    controlplane: ControlPlane, admin: k8s.ApiClient, namespace: str
) -> None:
    ca_reader(admin, present=False)
    with contextlib.suppress(k8s.ApiException):
        k8s.CoreV1Api(admin).delete_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS)
    client = consumer(controlplane, admin, namespace)
    try:
        # Nothing installed: one line naming what was tried.
        with pytest.raises(ConfigError) as missing:
            await client._ca.get()
        assert str(missing.value).startswith("no Exec Agent CA: none was given (serving_ca, --ca")
        assert f"ConfigMap {NS}/{names.CA_BUNDLE_CONFIG_MAP}" in str(missing.value)
        # Published, but without install.yaml's Role the consumer may not read it.
        publish(admin, {names.SERVING_CA_BUNDLE_KEY: PEM.decode()})
        with pytest.raises(ConfigError, match="could not be read: .*forbidden"):
            await client._ca.get()
        ca_reader(admin, present=True)
        # Readable, but the CSR approver has not written the agents' CA yet.
        with pytest.raises(ConfigError, match="has no exec-agent-serving-ca.crt yet"):
            await client._ca.get()
        publish(admin, {names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY: PEM.decode()})
        await client._ca.get()  # a failed lookup is tried again
        assert client._ca.known == PEM
    finally:
        await client.aclose()


@pytest.mark.req("CT-107")
async def test_the_ca_reader_opens_that_one_config_map_and_nothing_else(
    controlplane: ControlPlane, admin: k8s.ApiClient, namespace: str
) -> None:
    # Attacked as a consumer would: every other object of the namespace stays closed to it.
    ca_reader(admin, present=True)
    publish(admin, {names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY: PEM.decode()})
    ensure_service_account(admin, namespace, "other")
    api = token_client(controlplane, request_token(admin, namespace, "other"))
    core = k8s.CoreV1Api(api)
    with contextlib.suppress(k8s.ApiException):
        k8s.CoreV1Api(admin).create_namespaced_config_map(
            NS, {"metadata": {"name": names.ADDRESS_PINS_CONFIG_MAP}, "data": {}}
        )
    try:
        assert core.read_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS).data
        for call in (
            lambda: core.read_namespaced_config_map(names.ADDRESS_PINS_CONFIG_MAP, NS),
            lambda: core.list_namespaced_config_map(NS),
            lambda: core.list_namespaced_secret(NS),
            lambda: core.patch_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS, {"data": {}}),
            lambda: core.delete_namespaced_config_map(names.CA_BUNDLE_CONFIG_MAP, NS),
        ):
            with pytest.raises(k8s.ApiException) as refused:
                call()
            assert refused.value.status == 403
    finally:
        api.close()
    client = consumer(controlplane, admin, namespace)
    try:
        assert await published_ca(client._kube) == PEM
    finally:
        await client.aclose()


async def test_a_lookup_done_before_its_callbacks_ran_still_gives_the_ca() -> None:
    # The CLI connects ahead while a claim binds (`then`); its exec may ask (`get`) in the turn
    # between the lookup's end and its callbacks: the cold CI run's `battery run` did.
    lookup = CaLookup.__new__(CaLookup)
    lookup.known = None
    done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    done.set_result(PEM)  # finished; `_done` would run on the next turn only
    lookup._task = done
    assert await lookup.get() == PEM
    assert lookup.known == PEM
