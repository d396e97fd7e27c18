"""Errors of the Kubernetes API client, and the one place API failures become them.

Callers branch on these classes and never see a transport's own errors: `KubeClient` turns every
failed request into one of the classes below, read from the Status object the API server sends
(`reason`, `message`, `details`), chained to the connection's error where there was one. Each error
carries the HTTP status (`status`, 0 when no answer came), the Status `reason`, the server's
`message`, and the Kubernetes verb and URL path of the request (`verb`, `path`), which name the
object concerned.

    Exception
    ├── KubeError                    a request failed: .status, .reason, .message, .verb, .path,
    │   │                            .details (the Status details), .causes (details.causes)
    │   ├── NotFoundError            404: no such object (or namespace, or resource)
    │   ├── ConflictError            409: a stale resourceVersion, a failed uid or
    │   │                            resourceVersion precondition, a JSON patch with a `test`
    │   │                            that did not apply (the server says 422; see below), or, with
    │   │                            `.reason == "AlreadyExists"`, a create of an existing name
    │   ├── ForbiddenError           403: RBAC denied the request (also admission refusals and
    │   │                            a namespace being terminated)
    │   ├── UnauthorizedError        401: no or wrong credentials (expired token)
    │   ├── InvalidError             422: the object failed validation; `.causes` lists the
    │   │                            fields (`{"reason", "message", "field"}` as sent)
    │   ├── TooManyRequestsError     429: throttled; `.retry_after` seconds if the server said
    │   └── KubeUnavailableError     5xx, no connection, TLS failure, timeout, or an unreadable
    │                                answer: the outcome of a write is unknown
    └── ValueError
        └── KubeConfigError          a kubeconfig or in-cluster configuration cannot be used

Other statuses (400 BadRequest, 405, 410 Expired, 415) raise the base class. A caller's own
cancellation (`asyncio.CancelledError`) is never mapped.

A JSON patch that cannot be applied to the stored object (a `test` operation that fails, or a
path that is not there) is answered 422 with a generic message and no causes. Such a patch with
a `test` operation is how a client writes "only if the object is still at resourceVersion N"
(kopf does the same), so for a patch holding a `test` operation that answer is mapped to
`ConflictError` with `reason == "Conflict"` (`.status` stays 422). A patched object that fails
validation still raises `InvalidError`, with its causes.
"""

from __future__ import annotations

from typing import Any, Final

REASON_ALREADY_EXISTS: Final = "AlreadyExists"
"""Status reason of a create whose name is taken (a `ConflictError`)."""
REASON_CONFLICT: Final = "Conflict"
"""Status reason of a write that lost an optimistic-concurrency race (a `ConflictError`)."""

UNAVAILABLE_STATUS: Final = 0
"""`KubeError.status` when no HTTP answer came back (connection, TLS, timeout)."""


class KubeError(Exception):
    """A Kubernetes API request failed; `status`, `reason` and `message` say how and why.

    `verb` is the Kubernetes verb (`get`, `list`, `create`, `patch`, `update`, `delete`) and
    `path` the URL path, which names the resource, namespace and object concerned.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        verb: str = "",
        path: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.verb = verb
        self.path = path
        self.details: dict[str, Any] = details or {}

    @property
    def causes(self) -> list[dict[str, Any]]:
        """The server's `details.causes`: dicts with `reason`, `message` and `field`."""
        causes = self.details.get("causes")
        return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []

    @property
    def fields(self) -> list[str]:
        """The field paths named in `causes` (e.g. `spec.template.interfaces[0].deviceId`)."""
        return [str(c["field"]) for c in self.causes if c.get("field")]

    def __str__(self) -> str:
        where = f"{self.verb} {self.path}: " if self.verb or self.path else ""
        status = f"{self.status} " if self.status else ""
        return f"{where}{status}{self.reason}: {self.message or '(no message)'}"


class NotFoundError(KubeError):
    """The object, its namespace or its resource does not exist (404)."""


class ConflictError(KubeError):
    """A precondition or resourceVersion check failed, or the name is taken (409).

    `reason` tells them apart: `"AlreadyExists"` for a create of an existing name,
    `"Conflict"` otherwise.
    """

    @property
    def already_exists(self) -> bool:
        """Whether this is a create of a name that exists already."""
        return self.reason == REASON_ALREADY_EXISTS


class ForbiddenError(KubeError):
    """The caller may not do this (403): RBAC, admission, or a terminating namespace."""


class UnauthorizedError(KubeError):
    """The server did not accept the caller's credentials (401)."""


class InvalidError(KubeError):
    """The object failed validation (422); `causes` and `fields` say which fields, and why."""


class TooManyRequestsError(KubeError):
    """The server throttled the request (429); `retry_after` is its hint in seconds, if any."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        verb: str = "",
        path: str = "",
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, reason, message, verb=verb, path=path, details=details)
        if retry_after is None:
            seconds = self.details.get("retryAfterSeconds")
            retry_after = float(seconds) if isinstance(seconds, int | float) else None
        self.retry_after = retry_after


class KubeUnavailableError(KubeError):
    """No usable answer (5xx, connection, TLS, timeout): the outcome of a write is unknown."""


class KubeConfigError(ValueError):
    """A kubeconfig (`source`: its path) or the in-cluster environment cannot be used."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(source, problem)
        self.source = source
        self.problem = problem

    def __str__(self) -> str:
        return f"Kubernetes configuration {self.source}: {self.problem}"


_BY_STATUS: dict[int, type[KubeError]] = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidError,
    429: TooManyRequestsError,
}

_REASON_BY_STATUS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def error_class(status: int) -> type[KubeError]:
    """The error class for an HTTP status of 400 or above."""
    if status >= 500:
        return KubeUnavailableError
    return _BY_STATUS.get(status, KubeError)


def from_response(
    status: int,
    body: bytes | dict[str, Any] | None,
    *,
    verb: str,
    path: str,
    retry_after: str | None = None,
    json_patch_test: bool = False,
) -> KubeError:
    """The error for a failed answer (not raised; the caller raises it).

    `body` is the parsed Status object, or the raw bytes when the answer was not JSON (a proxy's
    page, say). `retry_after` is the Retry-After header. `json_patch_test` says the request was a
    JSON patch holding a `test` operation: when it did not apply, that is a conflict.
    """
    reason = _REASON_BY_STATUS.get(status, "Unknown")
    message = ""
    details: dict[str, Any] = {}
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or "")
        raw_details = body.get("details")
        details = raw_details if isinstance(raw_details, dict) else {}
    elif isinstance(body, bytes):
        message = body.decode("utf-8", errors="replace").strip()[:512]
    elif isinstance(body, dict):
        message = str(body)[:512]
    cls = error_class(status)
    if json_patch_test and status == 422 and not details.get("causes"):
        # The patch did not apply (a validation failure would name its causes).
        cls, reason = ConflictError, REASON_CONFLICT
        message = f"the JSON patch did not apply: a test failed or a path is missing ({message})"
    if cls is TooManyRequestsError:
        after: float | None = None
        if retry_after and retry_after.strip().isdigit():
            after = float(retry_after.strip())
        return TooManyRequestsError(
            status, reason, message, verb=verb, path=path, details=details, retry_after=after
        )
    return cls(status, reason, message, verb=verb, path=path, details=details)
