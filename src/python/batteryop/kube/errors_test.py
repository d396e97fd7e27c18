from __future__ import annotations

from typing import Any

import pytest

from batteryop.kube.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeError,
    KubeUnavailableError,
    NotFoundError,
    TooManyRequestsError,
    UnauthorizedError,
    from_response,
)


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (401, "Unauthorized", UnauthorizedError),
        (403, "Forbidden", ForbiddenError),
        (404, "NotFound", NotFoundError),
        (409, "Conflict", ConflictError),
        (409, "AlreadyExists", ConflictError),
        (422, "Invalid", InvalidError),
        (429, "TooManyRequests", TooManyRequestsError),
        (500, "InternalError", KubeUnavailableError),
        (503, "ServiceUnavailable", KubeUnavailableError),
        (504, "Timeout", KubeUnavailableError),
        (400, "BadRequest", KubeError),
        (410, "Expired", KubeError),
    ],
)
def test_each_status_maps_to_its_class(code: int, reason: str, cls: type[KubeError]) -> None:
    err = from_response(code, status(code, reason, "why"), verb="get", path="/api/v1/x")
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (code, reason, "why")
    assert str(err) == f"get /api/v1/x: {code} {reason}: why"


def test_already_exists_is_a_conflict_told_apart_by_its_reason() -> None:
    err = from_response(409, status(409, "AlreadyExists", "exists"), verb="create", path="/p")
    assert isinstance(err, ConflictError)
    assert err.already_exists
    stale = from_response(409, status(409, "Conflict", "modified"), verb="update", path="/p")
    assert isinstance(stale, ConflictError)
    assert not stale.already_exists


def test_invalid_keeps_the_causes_and_their_fields() -> None:
    causes = [
        {"reason": "FieldValueInvalid", "message": "bad", "field": "spec.size"},
        {"reason": "FieldValueRequired", "message": "missing", "field": "spec.template"},
    ]
    err = from_response(
        422, status(422, "Invalid", "x is invalid", causes=causes), verb="create", path="/p"
    )
    assert isinstance(err, InvalidError)
    assert err.causes == causes
    assert err.fields == ["spec.size", "spec.template"]


def test_a_json_patch_test_that_did_not_apply_is_a_conflict() -> None:
    generic = status(
        422, "Invalid", "the server rejected our request due to an error in our request"
    )
    err = from_response(422, generic, verb="patch", path="/p", json_patch_test=True)
    assert isinstance(err, ConflictError)
    assert (err.status, err.reason) == (422, "Conflict")
    assert "did not apply" in err.message
    # Without a test operation it stays what the server said.
    assert type(from_response(422, generic, verb="patch", path="/p")) is InvalidError


def test_a_patched_object_failing_validation_stays_invalid_even_with_a_test() -> None:
    body = status(422, "Invalid", "bad", causes=[{"field": "data", "message": "m"}])
    err = from_response(422, body, verb="patch", path="/p", json_patch_test=True)
    assert type(err) is InvalidError


def test_retry_after_comes_from_the_header_or_the_status() -> None:
    err = from_response(
        429, status(429, "TooManyRequests", "slow"), verb="list", path="/p", retry_after="3"
    )
    assert isinstance(err, TooManyRequestsError)
    assert err.retry_after == 3.0
    err = from_response(
        429, status(429, "TooManyRequests", "slow", retryAfterSeconds=7), verb="list", path="/p"
    )
    assert isinstance(err, TooManyRequestsError)
    assert err.retry_after == 7.0


def test_an_answer_that_is_not_a_status_keeps_its_text() -> None:
    err = from_response(502, b"<html>bad gateway</html>", verb="get", path="/p")
    assert isinstance(err, KubeUnavailableError)
    assert err.reason == "Unknown"
    assert err.message == "<html>bad gateway</html>"
    assert err.causes == []
