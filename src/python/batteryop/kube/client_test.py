"""KubeClient against the real kube-apiserver (and, for answers a real server will not give on
demand, a few-line aiohttp server)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from batteryop.api import samples
from batteryop.kube.client import KubeClient, without_managed_fields
from batteryop.kube.config import KubeConfig
from batteryop.kube.conftest import ServiceAccountConfig, grant
from batteryop.kube.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeError,
    KubeUnavailableError,
    NotFoundError,
    TooManyRequestsError,
    UnauthorizedError,
)
from batteryop.kube.resources import CLAIMS, CONFIGMAPS, POOLS, SECRETS, SERVICEACCOUNTS
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.controlplane.server import free_port
from batteryop.tls import CertificateAuthority

pytestmark = pytest.mark.controlplane


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


# -- CRUD ------------------------------------------------------------------------------------


async def test_a_configmap_is_created_read_replaced_and_deleted(
    kube: KubeClient, namespace: str
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("cm", a="1"), namespace)
    assert created["metadata"]["namespace"] == namespace
    got = await kube.get(CONFIGMAPS, "cm", namespace)
    assert got["data"] == {"a": "1"}
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    got["data"]["b"] = "2"
    replaced = await kube.replace(CONFIGMAPS, "cm", got)  # namespace from the body
    assert replaced["data"] == {"a": "1", "b": "2"}

    await kube.delete(CONFIGMAPS, "cm", namespace)
    with pytest.raises(NotFoundError):
        await kube.get(CONFIGMAPS, "cm", namespace)


async def test_creating_a_taken_name_is_already_exists(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("cm"), namespace)
    with pytest.raises(ConflictError) as caught:
        await kube.create(CONFIGMAPS, configmap("cm"), namespace)
    assert caught.value.already_exists
    assert caught.value.reason == "AlreadyExists"
    assert caught.value.verb == "create"
    assert caught.value.path == f"/api/v1/namespaces/{namespace}/configmaps"


async def test_replace_with_a_stale_resource_version_is_a_conflict(
    kube: KubeClient, namespace: str
) -> None:
    first = await kube.create(CONFIGMAPS, configmap("cm", a="1"), namespace)
    await kube.patch(CONFIGMAPS, "cm", {"data": {"a": "2"}}, namespace)
    first["data"]["a"] = "3"
    with pytest.raises(ConflictError) as caught:
        await kube.replace(CONFIGMAPS, "cm", first, namespace)
    assert not caught.value.already_exists
    assert "the object has been modified" in caught.value.message


# -- list --------------------------------------------------------------------------------------


async def test_list_filters_by_label_and_field_selectors(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("red-1", {"color": "red"}), namespace)
    await kube.create(CONFIGMAPS, configmap("red-2", {"color": "red"}), namespace)
    await kube.create(CONFIGMAPS, configmap("blue", {"color": "blue"}), namespace)

    red = await kube.list(CONFIGMAPS, namespace, label_selector="color=red")
    assert sorted(o["metadata"]["name"] for o in red) == ["red-1", "red-2"]
    assert {(o["apiVersion"], o["kind"]) for o in red} == {("v1", "ConfigMap")}

    one = await kube.list(
        CONFIGMAPS, namespace, label_selector="color", field_selector="metadata.name=blue"
    )
    assert [o["metadata"]["name"] for o in one] == ["blue"]


async def test_list_follows_continue_across_pages(kube: KubeClient, namespace: str) -> None:
    expected = [f"cm-{i}" for i in range(5)]
    for name in expected:
        await kube.create(CONFIGMAPS, configmap(name, {"paged": "yes"}), namespace)
    # Two objects a page: three requests, one list.
    paged = await kube.list(CONFIGMAPS, namespace, label_selector="paged=yes", limit=2)
    assert sorted(o["metadata"]["name"] for o in paged) == expected


async def test_a_slim_list_and_watch_leave_out_managed_fields_and_nothing_else(
    kube: KubeClient, namespace: str
) -> None:
    for name in ("slim-0", "slim-1", "slim-2"):
        await kube.create(CONFIGMAPS, configmap(name, {"slim": "yes"}), namespace)
    full = await kube.list(CONFIGMAPS, namespace, label_selector="slim=yes")
    assert all("managedFields" in o["metadata"] for o in full)  # the API server sends them
    slim = await kube.list(CONFIGMAPS, namespace, label_selector="slim=yes", limit=2, slim=True)
    assert slim == [without_managed_fields(o) for o in full]
    assert all(
        set(o["metadata"]) == set(f["metadata"]) - {"managedFields"}
        for o, f in zip(slim, full, strict=True)
    )
    async for kind, obj in kube.watch(
        CONFIGMAPS,
        namespace,
        label_selector="slim=yes",
        resource_version="0",  # the current objects first, as ADDED events
        timeout_seconds=5,
        slim=True,
    ):
        assert kind == "ADDED"
        assert obj == without_managed_fields(
            next(f for f in full if f["metadata"]["name"] == obj["metadata"]["name"])
        )
        break
    else:
        raise AssertionError("the watch ended without an event")


async def test_list_across_all_namespaces(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("everywhere"), namespace)
    found = await kube.list(CONFIGMAPS, field_selector=f"metadata.namespace={namespace}")
    assert [o["metadata"]["name"] for o in found if o["metadata"]["name"] == "everywhere"] == [
        "everywhere"
    ]


# -- patch -------------------------------------------------------------------------------------


async def test_merge_and_json_patches(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("cm", a="1", b="2"), namespace)
    merged = await kube.patch(CONFIGMAPS, "cm", {"data": {"a": "10", "b": None}}, namespace)
    assert merged["data"] == {"a": "10"}

    rv = merged["metadata"]["resourceVersion"]
    patched = await kube.patch(
        CONFIGMAPS,
        "cm",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/data/c", "value": "3"},
        ],
        namespace,
        type="json",
    )
    assert patched["data"] == {"a": "10", "c": "3"}


async def test_a_json_patch_testing_a_stale_resource_version_is_a_conflict(
    kube: KubeClient, namespace: str
) -> None:
    created = await kube.create(CONFIGMAPS, configmap("cm", a="1"), namespace)
    await kube.patch(CONFIGMAPS, "cm", {"data": {"a": "2"}}, namespace)
    stale = created["metadata"]["resourceVersion"]
    with pytest.raises(ConflictError) as caught:
        await kube.patch(
            CONFIGMAPS,
            "cm",
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
                {"op": "replace", "path": "/data/a", "value": "3"},
            ],
            namespace,
            type="json",
        )
    assert caught.value.verb == "patch"
    assert (await kube.get(CONFIGMAPS, "cm", namespace))["data"] == {"a": "2"}


async def test_strategic_and_apply_patches(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("cm", a="1"), namespace)
    strategic = await kube.patch(
        CONFIGMAPS, "cm", {"metadata": {"labels": {"x": "y"}}}, namespace, type="strategic"
    )
    assert strategic["metadata"]["labels"] == {"x": "y"}

    intent = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    intent["data"] = {"a": "applied"}
    with pytest.raises(ConflictError):  # `a` is owned by the creating manager
        await kube.patch(CONFIGMAPS, "cm", intent, namespace, type="apply", field_manager="t")
    applied = await kube.patch(
        CONFIGMAPS, "cm", intent, namespace, type="apply", field_manager="t", force=True
    )
    assert applied["data"] == {"a": "applied"}
    assert "t" in {m["manager"] for m in applied["metadata"]["managedFields"]}


async def test_apply_needs_a_field_manager_and_force_needs_apply() -> None:
    async with KubeClient(KubeConfig(server="http://127.0.0.1:1", ca_data=None)) as client:
        with pytest.raises(ValueError, match="field_manager"):
            await client.patch(CONFIGMAPS, "cm", {}, "ns", type="apply")
        with pytest.raises(ValueError, match="force"):
            await client.patch(CONFIGMAPS, "cm", {}, "ns", force=True)
        with pytest.raises(ValueError, match="list of operations"):
            await client.patch(CONFIGMAPS, "cm", {}, "ns", type="json")


@pytest.mark.usefixtures("crds")
async def test_the_status_subresource_of_a_pool_is_patched_on_its_own(
    kube: KubeClient, namespace: str
) -> None:
    pool = await kube.create(POOLS, samples.sample_pool("p"), namespace)
    assert pool["metadata"]["generation"] == 1

    patched = await kube.patch(
        POOLS,
        "p",
        {"status": {"observedGeneration": 1, "available": 3}, "spec": {"size": 9}},
        namespace,
        subresource="status",
    )
    assert patched["status"] == {"observedGeneration": 1, "available": 3}
    assert patched["spec"]["size"] == 4  # spec is not written through status

    # ...and status is not written through the main resource.
    again = await kube.patch(POOLS, "p", {"status": {"available": 0}}, namespace)
    assert again["status"]["available"] == 3


@pytest.mark.usefixtures("crds")
@pytest.mark.req("CL-002")
async def test_a_status_merge_patch_carrying_a_stale_resource_version_is_a_conflict(
    kube: KubeClient, namespace: str
) -> None:
    # The claim controller's bind writes its status locked this way: it must land only on
    # the version the bind read, never on a newer one or on another object of that name.
    claim = await kube.create(CLAIMS, samples.sample_claim("c", pool="p"), namespace)
    read = claim["metadata"]["resourceVersion"]
    await kube.patch(CLAIMS, "c", {"metadata": {"labels": {"moved": "on"}}}, namespace)
    with pytest.raises(ConflictError):
        await kube.patch(
            CLAIMS,
            "c",
            {"metadata": {"resourceVersion": read}, "status": {"leaseID": "l-1"}},
            namespace,
            subresource="status",
        )
    stored = await kube.get(CLAIMS, "c", namespace)
    assert "leaseID" not in (stored.get("status") or {})
    now = stored["metadata"]["resourceVersion"]
    landed = await kube.patch(
        CLAIMS,
        "c",
        {"metadata": {"resourceVersion": now}, "status": {"leaseID": "l-1"}},
        namespace,
        subresource="status",
    )
    assert landed["status"]["leaseID"] == "l-1"


@pytest.mark.usefixtures("crds")
@pytest.mark.req("CL-002")
async def test_a_uid_in_a_status_merge_patch_guards_nothing_the_resource_version_does(
    kube: KubeClient, namespace: str
) -> None:
    # A claim deleted and made again under its name (someone removed the finalizer by force).
    # The status subresource keeps the stored metadata, so a uid in a status merge-patch is
    # ignored and the old claim's status would land on the new claim; the resourceVersion the
    # write was decided on refuses it. This is why every status write of the operator carries
    # the resourceVersion it read (`kube.outcome`).
    old = await kube.create(CLAIMS, samples.sample_claim("c", pool="p"), namespace)
    await kube.delete(CLAIMS, "c", namespace)
    await kube.create(CLAIMS, samples.sample_claim("c", pool="p"), namespace)
    landed = await kube.patch(
        CLAIMS,
        "c",
        {"metadata": {"uid": old["metadata"]["uid"]}, "status": {"leaseID": "l-uid"}},
        namespace,
        subresource="status",
    )
    assert landed["metadata"]["uid"] != old["metadata"]["uid"]
    assert landed["status"]["leaseID"] == "l-uid", "the uid did not stop it"
    with pytest.raises(ConflictError):
        await kube.patch(
            CLAIMS,
            "c",
            {
                "metadata": {"resourceVersion": old["metadata"]["resourceVersion"]},
                "status": {"leaseID": "l-old"},
            },
            namespace,
            subresource="status",
        )
    assert (await kube.get(CLAIMS, "c", namespace))["status"]["leaseID"] == "l-uid"


# -- delete ------------------------------------------------------------------------------------


async def test_delete_with_a_wrong_uid_is_a_conflict(kube: KubeClient, namespace: str) -> None:
    created = await kube.create(CONFIGMAPS, configmap("cm"), namespace)
    with pytest.raises(ConflictError) as caught:
        await kube.delete(CONFIGMAPS, "cm", namespace, uid=str(uuid.uuid4()))
    assert "the UID in the precondition" in caught.value.message
    with pytest.raises(ConflictError):
        await kube.delete(CONFIGMAPS, "cm", namespace, resource_version="1")
    await kube.get(CONFIGMAPS, "cm", namespace)  # still there

    meta = created["metadata"]
    await kube.delete(
        CONFIGMAPS, "cm", namespace, uid=meta["uid"], resource_version=meta["resourceVersion"]
    )
    with pytest.raises(NotFoundError):
        await kube.delete(CONFIGMAPS, "cm", namespace)


# -- errors from the server --------------------------------------------------------------------


async def test_not_found_carries_the_server_message(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(NotFoundError) as caught:
        await kube.get(CONFIGMAPS, "nope", namespace)
    err = caught.value
    assert (err.status, err.reason) == (404, "NotFound")
    assert err.message == 'configmaps "nope" not found'
    assert err.details["name"] == "nope"
    assert str(err) == (
        f"get /api/v1/namespaces/{namespace}/configmaps/nope: 404 NotFound: {err.message}"
    )


@pytest.mark.usefixtures("crds")
async def test_a_pool_breaking_a_crd_rule_is_invalid_with_its_causes(
    kube: KubeClient, namespace: str
) -> None:
    pool = samples.sample_pool("bad")
    pool["spec"]["template"]["interfaces"] = [{"deviceId": "eth0", "type": "Tap"}]
    with pytest.raises(InvalidError) as caught:
        await kube.create(POOLS, pool, namespace)
    err = caught.value
    assert err.status == 422
    assert "deviceId eth0 is reserved" in err.message
    assert "spec.template.interfaces[0].deviceId" in err.fields
    assert any("deviceId eth0 is reserved" in c["message"] for c in err.causes)


async def test_a_service_account_logs_in_with_a_token_from_a_kubeconfig_file(
    kube: KubeClient, namespace: str, sa_config: ServiceAccountConfig
) -> None:
    config = sa_config(namespace, "reader")
    assert config.token and config.cert_data is None
    await grant(
        kube,
        namespace,
        "reader",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    )
    await kube.create(CONFIGMAPS, configmap("cm"), namespace)

    async with KubeClient(config) as reader:
        assert [o["metadata"]["name"] for o in await reader.list(CONFIGMAPS, namespace)] == ["cm"]
        with pytest.raises(ForbiddenError) as caught:
            await reader.get(SECRETS, "s", namespace)
        assert caught.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in caught.value.message
        assert 'cannot get resource "secrets"' in caught.value.message

        assert await reader.self_subject_access_review("list", CONFIGMAPS, namespace=namespace)
        assert await reader.self_subject_access_review(
            "get", "configmaps", namespace=namespace, name="cm"
        )
        assert not await reader.self_subject_access_review(
            "delete", "configmaps", namespace=namespace
        )
        assert not await reader.self_subject_access_review("get", "secrets", namespace=namespace)
        assert not await reader.self_subject_access_review(
            "patch", "pools", group=POOLS.group, namespace=namespace, subresource="status"
        )


async def test_the_admin_may_do_anything(kube: KubeClient) -> None:
    assert await kube.self_subject_access_review("delete", "nodes")
    assert await kube.self_subject_access_review(
        "patch", POOLS, namespace="any", name="p", subresource="status"
    )


async def test_a_wrong_token_is_unauthorized(controlplane: ControlPlane) -> None:
    config = KubeConfig.from_dict(controlplane.kubeconfig(token="not-a-token"))
    async with KubeClient(config) as client:
        with pytest.raises(UnauthorizedError) as caught:
            await client.list(CONFIGMAPS, "default")
    assert caught.value.status == 401


# -- transport failures ------------------------------------------------------------------------


async def test_no_server_is_unavailable(admin_config: KubeConfig) -> None:
    config = KubeConfig(
        server=f"https://127.0.0.1:{free_port()}",
        ca_data=admin_config.ca_data,
        cert_data=admin_config.cert_data,
        key_data=admin_config.key_data,
    )
    async with KubeClient(config) as client:
        with pytest.raises(KubeUnavailableError) as caught:
            await client.get(CONFIGMAPS, "cm", "ns")
    assert (caught.value.status, caught.value.reason) == (0, "ConnectionFailed")
    assert caught.value.__cause__ is not None


async def test_a_server_that_never_answers_times_out() -> None:
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        config = KubeConfig(server=f"http://127.0.0.1:{port}", ca_data=None)
        async with KubeClient(config, timeout=0.3) as client:
            with pytest.raises(KubeUnavailableError) as caught:
                await client.get(CONFIGMAPS, "cm", "ns")
        assert caught.value.reason == "Timeout"
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


async def test_the_server_certificate_must_match_the_ca(admin_config: KubeConfig) -> None:
    other_ca = CertificateAuthority.create("another-ca").cert_pem
    config = KubeConfig(
        server=admin_config.server,
        ca_data=other_ca,
        cert_data=admin_config.cert_data,
        key_data=admin_config.key_data,
    )
    async with KubeClient(config) as client:
        with pytest.raises(KubeUnavailableError, match="certificate"):
            await client.get(CONFIGMAPS, "cm", "ns")


async def test_a_closed_client_refuses_requests(admin_config: KubeConfig) -> None:
    client = KubeClient(admin_config)
    await client.list(CONFIGMAPS, "default")
    await client.aclose()
    with pytest.raises(KubeUnavailableError, match="closed"):
        await client.list(CONFIGMAPS, "default")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Handler], Awaitable[KubeClient]]]:
    """A client of a tiny HTTP server answering with `handler`, for answers (5xx, 429, an
    expired continue token) a real apiserver does not give on demand."""
    runners: list[web.AppRunner] = []
    clients: list[KubeClient] = []

    async def serve(handler: Handler) -> KubeClient:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        client = KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}", ca_data=None))
        clients.append(client)
        return client

    yield serve
    for c in clients:
        await c.aclose()
    for r in runners:
        await r.cleanup()


async def test_a_gateway_error_page_is_unavailable(
    scripted: Callable[[Handler], Awaitable[KubeClient]],
) -> None:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(status=503, text="upstream connect error")

    client = await scripted(handler)
    with pytest.raises(KubeUnavailableError) as caught:
        await client.get(CONFIGMAPS, "cm", "ns")
    assert (caught.value.status, caught.value.message) == (503, "upstream connect error")


async def test_throttling_carries_the_retry_after_header(
    scripted: Callable[[Handler], Awaitable[KubeClient]],
) -> None:
    async def handler(_: web.Request) -> web.Response:
        status = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow"}
        return web.json_response(status, status=429, headers={"Retry-After": "2"})

    client = await scripted(handler)
    with pytest.raises(TooManyRequestsError) as caught:
        await client.list(CONFIGMAPS, "ns")
    assert caught.value.retry_after == 2.0


async def test_an_expired_continue_token_restarts_the_list_in_one_request(
    scripted: Callable[[Handler], Awaitable[KubeClient]],
) -> None:
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        query = dict(request.query)
        seen.append(query)
        if "continue" in query:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return web.json_response(gone, status=410)
        page: dict[str, Any] = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {}}
        if "limit" in query:
            page["items"] = [{"metadata": {"name": "a"}}]
            page["metadata"]["continue"] = "token"
        else:
            page["items"] = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
        return web.Response(text=json.dumps(page), content_type="application/json")

    client = await scripted(handler)
    items = await client.list(CONFIGMAPS, "ns", limit=1)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert seen == [{"limit": "1"}, {"limit": "1", "continue": "token"}, {}]


async def test_other_failures_keep_the_base_class(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(KubeError) as caught:
        await kube.create(CONFIGMAPS, {"metadata": {"name": "x"}, "data": "not a map"}, namespace)
    assert type(caught.value) is KubeError
    assert caught.value.status == 400


async def test_watch_sees_a_change_from_a_resource_version(
    kube: KubeClient, namespace: str
) -> None:
    name = "watched"
    await kube.create(CONFIGMAPS, {"metadata": {"name": name}, "data": {"v": "1"}}, namespace)
    listed = await kube.list(CONFIGMAPS, namespace, field_selector=f"metadata.name={name}")
    rv = listed.resource_version  # the list's own: no change after it is missed
    assert int(rv) >= int(listed[0]["metadata"]["resourceVersion"])

    async def first_event() -> tuple[str, dict[str, Any]]:
        async for kind, obj in kube.watch(
            CONFIGMAPS,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=20,
        ):
            return kind, obj
        raise AssertionError("the watch ended without an event")

    task = asyncio.create_task(first_event())
    await asyncio.sleep(0.2)
    await kube.patch(CONFIGMAPS, name, {"data": {"v": "2"}}, namespace)
    kind, obj = await asyncio.wait_for(task, 25)
    assert (kind, obj["data"]["v"]) == ("MODIFIED", "2")


async def test_a_quiet_watch_hears_the_servers_bookmarks(kube: KubeClient, namespace: str) -> None:
    """Issue 43: bookmarks were dropped, so a watcher of a quiet object kept its old version
    and came back, once etcd had compacted it, with 410 Gone and a full list."""
    quiet = "quiet"
    await kube.create(CONFIGMAPS, {"metadata": {"name": quiet}}, namespace)
    listed = await kube.list(CONFIGMAPS, namespace, field_selector=f"metadata.name={quiet}")
    bookmarks: list[str] = []

    async def watched() -> list[str]:
        return [
            kind
            async for kind, _ in kube.watch(
                CONFIGMAPS,
                namespace,
                field_selector=f"metadata.name={quiet}",
                resource_version=listed.resource_version,
                timeout_seconds=4,  # the watch cache bookmarks a watch shortly before its end
                on_bookmark=bookmarks.append,
            )
        ]

    task = asyncio.create_task(watched())
    # Other writes move the store's version on while the watch is open; the watched object
    # does not change. The server bookmarks a version newer than the one the watch started
    # from only if a write reached its cache after the watch did, and the request may reach
    # the server after a first few writes: so the writes go on, a few a second, until the
    # watch ends.
    i = 0
    while not task.done():
        await kube.create(CONFIGMAPS, {"metadata": {"name": f"busy-{i}"}}, namespace)
        i += 1
        await asyncio.wait([task], timeout=0.25)
    assert await task == [], "the watched object did not change"
    assert bookmarks, "the server's bookmark never reached the caller"
    assert int(bookmarks[-1]) > int(listed.resource_version)


async def test_a_subresource_create_requests_a_token_bound_to_a_secret(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(SERVICEACCOUNTS, {"metadata": {"name": "holder"}}, namespace)
    secret = await kube.create(SECRETS, {"metadata": {"name": "s"}, "type": "Opaque"}, namespace)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": ["example"],
            "expirationSeconds": 600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": "s",
                "uid": secret["metadata"]["uid"],
            },
        },
    }
    answer = await kube.create(
        SERVICEACCOUNTS, request, namespace, name="holder", subresource="token"
    )
    assert answer["status"]["token"]
    assert answer["status"]["expirationTimestamp"]
    with pytest.raises(ValueError):
        await kube.create(SERVICEACCOUNTS, request, namespace, subresource="token")
