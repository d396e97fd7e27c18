"""`KubeClient`: the small async Kubernetes API client the controllers read and write with.

Everything goes through it, over kept-alive HTTP/1.1 connections (`batteryop.kube.http`): get, list (every page), watch (every kind
the operator follows, through `batteryop.kube.informer.list_watch`), create, patch (merge,
JSON, strategic, server-side apply), replace, delete with preconditions, and
SelfSubjectAccessReview. Objects go in and come out as plain dicts, exactly as the API
server sends them (list items get the `apiVersion` and `kind` the server leaves out).

Every failure is a `batteryop.kube.errors.KubeError` subclass read from the server's Status;
transport errors (connection, TLS, timeouts) never escape raw. The client does not retry: callers (the runtime,
the informer) decide, by error class, whether to retry, requeue or give up.

    async with KubeClient(KubeConfig.load()) as kube:
        cm = await kube.get(CONFIGMAPS, "flintlockd-ca", "battery-operator-system")
        await kube.patch(POOLS, "p", {"status": {...}}, "ns", subresource="status")
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, cast
from urllib.parse import urlencode

from batteryop.api._compat import TIMEOUT_ERRORS
from batteryop.api.closing import AsyncClosing
from batteryop.kube.config import KubeConfig
from batteryop.kube.errors import (
    UNAVAILABLE_STATUS,
    KubeConfigError,
    KubeError,
    KubeUnavailableError,
    UnauthorizedError,
    from_response,
)
from batteryop.kube.exec_plugin import ExecCredential
from batteryop.kube.http import Body, ConnectionPool
from batteryop.kube.resources import SELF_SUBJECT_ACCESS_REVIEWS, Resource

Object: TypeAlias = dict[str, Any]
"""A Kubernetes object (or Status) as the API server sends it."""
Objects: TypeAlias = list[dict[str, Any]]


def without_managed_fields(body: Mapping[str, Any]) -> Object:
    """`body` without `metadata.managedFields` (a shallow copy; `body` itself is not changed).

    Who set which field, kept by the API server for server-side apply: none of our deployables
    reads it, every object carries it, and decoded into Python objects it was 9.5 of a Bound
    claim's 15.9 KB. A follower that keeps many objects (`informer.list_watch`, the operator's
    cache) drops it as each object arrives."""
    out = dict(body)
    meta = out.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


SHARED_STRING_CHARS: Final = 40
"""Strings up to this long are shared between the objects `compact` makes: condition types and
reasons, phases, times to the second, names and uids; not the long messages."""


def compact(body: Mapping[str, Any]) -> Object:
    """`body` `without_managed_fields`, as a copy whose keys and short strings are shared with
    every other object compacted (`sys.intern`), for a follower that keeps many objects.

    A watch event is decoded on its own, so each body carried its own copy of every key and
    value: a Bound claim was 6.4 KB as Python objects, 3.5 KB compacted (measured on 2,000
    claims). The copy takes about 10 µs a body."""

    def shared(value: Any) -> Any:
        # Only exact strings can be interned: a str subclass (an enum member a test's fake put
        # in a body; JSON never makes one) is kept as it is.
        if isinstance(value, dict):
            return {
                (sys.intern(k) if k.__class__ is str else k): shared(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [shared(v) for v in value]
        if value.__class__ is str and len(value) <= SHARED_STRING_CHARS:
            return sys.intern(value)
        return value

    return cast(Object, shared(without_managed_fields(body)))


class ObjectList(list[dict[str, Any]]):
    """A list's objects, and the list's resourceVersion (a watch continues from it)."""

    resource_version: str = ""


PatchType = Literal["merge", "json", "strategic", "apply"]

PATCH_CONTENT_TYPES: Final[dict[str, str]] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    # Server-side apply takes YAML, and JSON is YAML.
    "apply": "application/apply-patch+yaml",
}

_TRANSPORT_ERRORS: Final[tuple[type[Exception], ...]] = (OSError, *TIMEOUT_ERRORS)
"""What the transport may raise instead of giving an answer (`http.HttpError` and TLS errors
are `OSError`s); each becomes `KubeUnavailableError`."""

DEFAULT_PAGE_SIZE: Final = 500
"""Objects per page of `list` (as kubectl); `list` always returns every page."""


class KubeClient(AsyncClosing):
    """An async Kubernetes API client over one pool of connections (opened on first use).

    `timeout` bounds each request, in seconds, connect to last byte. Use as
    `async with`, or call `aclose()`.
    """

    def __init__(
        self, config: KubeConfig, *, timeout: float = 30.0, user_agent: str = "battery-operator"
    ) -> None:
        self.config = config
        self._base = config.server.rstrip("/")
        self._timeout = timeout
        self._user_agent = user_agent
        # Built now, so bad certificates fail at start, not at the first request.
        self._ssl = config.ssl_context() if self._base.startswith("https://") else None
        self._pool: ConnectionPool | None = None
        # An exec plugin's client certificate is in the pool's TLS context: a new
        # certificate gets a new pool; the old one closes with the client (CC-112).
        self._pool_cred: ExecCredential | None = None
        self._retired: list[ConnectionPool] = []
        self._closed = False

    async def aclose(self) -> None:
        """Close the connections; later requests fail with `KubeUnavailableError`."""
        self._closed = True
        pool, self._pool = self._pool, None
        retired, self._retired = self._retired, []
        for old in [*retired, pool]:
            if old is not None:
                await old.aclose()

    # -- reads -------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Object:
        """The object `name` (in `namespace`, for a namespaced resource)."""
        return await self._request("get", "GET", res.api_path(namespace, name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = DEFAULT_PAGE_SIZE,
        slim: bool = False,
    ) -> ObjectList:
        """Every object matching the selectors, in `namespace` or (None) all namespaces.

        Pages of `limit` objects are fetched one after the other, following `continue`, and
        joined (with `slim`, each object `without_managed_fields` as its page arrives, so the
        pages of a large list are never held whole); `limit=None` asks for everything at once. When a continue token has expired
        (410) the list starts again in one request, as client-go's pager does. The answer's
        `resource_version` is where a watch continues without a gap.
        """
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit is not None:
            params["limit"] = str(limit)
        path = res.api_path(namespace)
        items = ObjectList()
        while True:
            try:
                page = await self._request("list", "GET", path, params=params)
            except KubeError as e:
                if e.status == 410 and "continue" in params:
                    del params["continue"]
                    params.pop("limit", None)
                    items = ObjectList()
                    continue
                raise
            api_version = str(page.get("apiVersion") or res.api_version)
            kind = str(page.get("kind") or "").removesuffix("List")
            for item in page.get("items") or []:
                item.setdefault("apiVersion", api_version)
                if kind:
                    item.setdefault("kind", kind)
                items.append(without_managed_fields(item) if slim else item)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                items.resource_version = str(metadata.get("resourceVersion") or "")
                return items
            params["continue"] = str(token)

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        on_bookmark: Callable[[str], None] | None = None,
        slim: bool = False,
    ) -> AsyncIterator[tuple[str, Object]]:
        """One watch request: yield (type, object) until the server ends it (with `slim`, each
        object `without_managed_fields`).

        Bookmarks are asked for and not yielded: `on_bookmark`, if given, hears each one's
        resourceVersion. A caller that watches again from the last version it saw must take
        those too, or a quiet watch (no event for longer than etcd keeps history) comes back
        with 410 Gone and lists again. An ERROR event is raised as the KubeError its Status
        names (410 Gone: the resourceVersion is too old; list again). The caller loops: list,
        then watch from the list's resourceVersion, then watch again from the last seen one.
        """
        params: dict[str, str] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if field_selector:
            params["fieldSelector"] = field_selector
        if label_selector:
            params["labelSelector"] = label_selector
        if resource_version:
            params["resourceVersion"] = resource_version
        path = res.api_path(namespace)
        target = f"{path}?{urlencode(params)}"
        try:
            for attempt in (1, 2):
                pool, headers, cred = await self._login("watch", path)
                # The server sends the head at once and then events as they happen (bookmarks
                # at least every minute): a read waits at most the watch's own timeout, plus 30 s.
                async with pool.stream(
                    "GET",
                    target,
                    headers,
                    connect_timeout=timeout_seconds + 30,
                    read_timeout=timeout_seconds + 30,
                ) as body:
                    # The exec plugin's credential was refused: once more with a new one (CC-112).
                    if body.status == 401 and attempt == 1 and self._refused(cred):
                        continue
                    if body.status >= 400:
                        raw = await body.read()
                        try:
                            parsed: Any = json.loads(raw) if raw else None
                        except ValueError:
                            parsed = None
                        raise from_response(
                            body.status,
                            parsed if isinstance(parsed, dict) else raw,
                            verb="watch",
                            path=path,
                        )
                    async for kind, obj in _events(body, path, on_bookmark):
                        yield kind, without_managed_fields(obj) if slim else obj
                    return
        except _TRANSPORT_ERRORS as e:
            reason = "Timeout" if isinstance(e, TIMEOUT_ERRORS) else "ConnectionFailed"
            raise KubeUnavailableError(
                UNAVAILABLE_STATUS, reason, str(e) or type(e).__name__, verb="watch", path=path
            ) from e

    # -- writes ------------------------------------------------------------------------------

    async def create(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Object:
        """Create `body`; the namespace defaults to the body's `metadata.namespace`.

        With `name` and `subresource`, POST to that object's subresource instead, e.g. a
        TokenRequest to `serviceaccounts/<name>/token`.
        """
        if (name is None) != (subresource is None):
            raise ValueError("a create names both the object and its subresource, or neither")
        ns = namespace or _body_namespace(res, body)
        return await self._request("create", "POST", res.api_path(ns, name, subresource), body=body)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        *,
        type: PatchType = "merge",  # the API's word for it
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> Object:
        """Patch the object (or its `subresource`, e.g. `status`) and return the result.

        `type`: `merge` (RFC 7386; lists are replaced whole), `json` (RFC 6902 operations; a
        patch with a `test` operation that does not apply raises `ConflictError`), `strategic` (built-in kinds only), or `apply`
        (server-side apply of a full intent object; needs `field_manager`, and `force=True`
        takes over fields other managers own).
        """
        content_type = PATCH_CONTENT_TYPES.get(type)
        if content_type is None:
            raise ValueError(f"unknown patch type {type!r}")
        if type == "json" and isinstance(patch, Mapping):
            raise ValueError("a JSON patch is a list of operations")
        if type != "json" and not isinstance(patch, Mapping):
            raise ValueError(f"a {type} patch is an object")
        if type == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        if force and type != "apply":
            raise ValueError("force applies only to server-side apply")
        params: dict[str, str] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if force:
            params["force"] = "true"
        return await self._request(
            "patch",
            "PATCH",
            res.api_path(namespace, name, subresource),
            params=params,
            body=patch,
            content_type=content_type,
            json_patch_test=type == "json" and _has_test_op(patch),
        )

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Object:
        """Replace (PUT) the object or its subresource; `metadata.resourceVersion` in `body`,
        if set, makes it conditional (`ConflictError` when stale)."""
        ns = namespace or _body_namespace(res, body)
        return await self._request("update", "PUT", res.api_path(ns, name, subresource), body=body)

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Delete the object, only if it still has `uid` / `resource_version` when given
        (`ConflictError` otherwise; `NotFoundError` if it is gone)."""
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        await self._request("delete", "DELETE", res.api_path(namespace, name), body=options)

    # -- access checks -----------------------------------------------------------------------

    async def self_subject_access_review(
        self,
        verb: str,
        resource: str | Resource,
        *,
        group: str = "",
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """Whether this client's identity may `verb` the resource (a plural, or a `Resource`,
        whose group and version are then used instead of `group`)."""
        attributes: dict[str, str] = {"verb": verb}
        if isinstance(resource, Resource):
            attributes.update(
                group=resource.group, version=resource.version, resource=resource.plural
            )
        else:
            attributes.update(group=group, resource=resource)
        for key, value in (("namespace", namespace), ("name", name), ("subresource", subresource)):
            if value:
                attributes[key] = value
        review = {
            "apiVersion": SELF_SUBJECT_ACCESS_REVIEWS.api_version,
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await self._request(
            "create", "POST", SELF_SUBJECT_ACCESS_REVIEWS.api_path(None), body=review
        )
        return bool((answer.get("status") or {}).get("allowed"))

    # -- the one place requests are made ------------------------------------------------------

    async def _login(
        self, verb: str, path: str
    ) -> tuple[ConnectionPool, dict[str, str], ExecCredential | None]:
        """The connection pool and headers of one request, with the credential it carries: the exec
        plugin's (run when none is kept or it expired, CC-112), else the config's token."""
        headers: dict[str, str] = {}
        cred: ExecCredential | None = None
        try:
            plugin = self.config.exec_plugin
            if plugin is not None:
                cred = await plugin.acredential()
                token = cred.token
            else:
                token = self.config.bearer_token()
            pool = self._open_pool(cred)
        except KubeConfigError as e:
            raise UnauthorizedError(
                UNAVAILABLE_STATUS, "Unauthorized", str(e), verb=verb, path=path
            ) from e
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return pool, headers, cred

    def _refused(self, cred: ExecCredential | None) -> bool:
        """After a 401: forget the exec plugin's credential `cred`; whether to try again."""
        plugin = self.config.exec_plugin
        if plugin is None or cred is None:
            return False
        plugin.invalidate(cred)
        return True

    def _open_pool(self, cred: ExecCredential | None = None) -> ConnectionPool:
        if (
            cred is not None
            and cred.cert_data is not None
            and cred is not self._pool_cred
            and self._base.startswith("https://")
        ):
            # A (new) client certificate from the exec plugin: a pool that presents it.
            self._ssl = self.config.ssl_context(cred)
            self._pool_cred = cred
            if self._pool is not None:
                self._retired.append(self._pool)
                self._pool = None
        if self._pool is None:
            self._pool = ConnectionPool(
                self._base,
                self._ssl,
                {"User-Agent": self._user_agent, "Accept": "application/json"},
            )
        return self._pool

    async def _request(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        content_type: str = "application/json",
        json_patch_test: bool = False,
    ) -> Object:
        if self._closed:
            raise KubeUnavailableError(
                UNAVAILABLE_STATUS, "ClientClosed", "the client is closed", verb=verb, path=path
            )
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body).encode()
        for attempt in (1, 2):
            pool, headers, cred = await self._login(verb, path)
            if data is not None:
                headers["Content-Type"] = content_type
            status, raw, retry_after = await self._send(
                pool, verb, method, path, params, data, headers
            )
            # A 401 means nothing was done: with an exec plugin's credential, try once more
            # with a new one (CC-112).
            if not (status == 401 and attempt == 1 and self._refused(cred)):
                break
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        if status >= 400:
            raise from_response(
                status,
                parsed if isinstance(parsed, dict) else raw,
                verb=verb,
                path=path,
                retry_after=retry_after,
                json_patch_test=json_patch_test,
            )
        if not isinstance(parsed, dict):
            raise KubeUnavailableError(
                status, "InvalidResponse", "the answer is not a JSON object", verb=verb, path=path
            )
        return parsed

    async def _send(
        self,
        pool: ConnectionPool,
        verb: str,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        data: bytes | None,
        headers: dict[str, str],
    ) -> tuple[int, bytes, str | None]:
        """One request; its status, body and Retry-After. Transport errors become ours."""
        target = f"{path}?{urlencode(params)}" if params else path
        try:
            answer = await pool.request(method, target, headers, data, timeout=self._timeout)
            return answer.status, answer.body, answer.headers.get("retry-after")
        except _TRANSPORT_ERRORS as e:
            # A timeout raises asyncio.TimeoutError: the built-in TimeoutError (an OSError)
            # from 3.11, a class of its own on 3.10 (the client wheel runs there).
            reason = "Timeout" if isinstance(e, TIMEOUT_ERRORS) else "ConnectionFailed"
            raise KubeUnavailableError(
                UNAVAILABLE_STATUS, reason, str(e) or type(e).__name__, verb=verb, path=path
            ) from e


class WatchCursor:
    """The resourceVersion a watch continues from: the newest of an event's or a bookmark's.

    Pass `move` as `KubeClient.watch`'s `on_bookmark` and call it with each event's version."""

    def __init__(self, version: str | None) -> None:
        self.version = version or None

    def move(self, version: str | None) -> None:
        if version:
            self.version = version


def _body_namespace(res: Resource, body: Mapping[str, Any]) -> str | None:
    if not res.namespaced:
        return None
    meta = body.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return str(ns) if ns else None


def _has_test_op(patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> bool:
    return not isinstance(patch, Mapping) and any(
        isinstance(op, Mapping) and op.get("op") == "test" for op in patch
    )


async def _events(
    body: Body, path: str, on_bookmark: Callable[[str], None] | None
) -> AsyncIterator[tuple[str, Object]]:
    """A watch's events, one JSON object a line; bookmarks told to `on_bookmark`, an ERROR
    raised."""
    async for line in body.lines():
        if not line.strip():
            continue
        event = json.loads(line)
        kind, obj = str(event.get("type")), event.get("object") or {}
        if kind == "BOOKMARK":
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if on_bookmark is not None and version:
                on_bookmark(str(version))
            continue
        if kind == "ERROR":
            raise from_response(int(obj.get("code") or 500), obj, verb="watch", path=path)
        yield kind, obj
