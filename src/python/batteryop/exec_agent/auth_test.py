"""The pure parts of the checks: the bearer header and reading a reviewed token's binding. The
checks against the API server are in authorization_test.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
import pytest

from batteryop.exec_agent.auth import (
    CREDENTIAL_ID_EXTRA,
    SecretBinding,
    bearer_token,
    read_binding,
)
from batteryop.exec_agent.errors import Check, RefusedError

USER = "system:serviceaccount:ns:sandbox"


def jwt(payload: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(payload)}.c2lnbmF0dXJl"


def bound(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "sub": USER,
        "jti": "id-1",
        "kubernetes.io": {
            "namespace": "ns",
            "secret": {"name": "c-exec", "uid": "uid-1"},
            "serviceaccount": {"name": "sandbox", "uid": "sa-uid"},
        },
    }
    payload.update(overrides)
    return payload


@pytest.mark.req("EA-010")
def test_the_bearer_token_is_taken_from_exactly_one_entry() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("Authorization", "bearer abc"), ("x-other", "1")]) == "abc"
    for metadata in ([], [("authorization", "Token abc")], [("authorization", "Bearer")]):
        with pytest.raises(RefusedError) as caught:
            bearer_token(metadata)
        assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert caught.value.check == Check.BEARER_TOKEN


@pytest.mark.req("EA-012")
def test_a_bound_token_names_its_secret_by_name_and_uid() -> None:
    token = jwt(bound())
    binding, problem = read_binding(token, USER, {CREDENTIAL_ID_EXTRA: ["JTI=id-1"]})
    assert binding == SecretBinding("ns", "c-exec", "uid-1")
    assert problem == ""


@pytest.mark.req("EA-012")
@pytest.mark.parametrize(
    ("payload", "extra", "problem"),
    [
        (bound(sub="system:serviceaccount:ns:other"), {}, "subject is not the reviewed user"),
        (bound(), {CREDENTIAL_ID_EXTRA: ["JTI=id-2"]}, "id is not the one the review reports"),
        (bound(**{"kubernetes.io": {"namespace": "ns"}}), {}, "not bound to a Secret"),
        (
            bound(**{"kubernetes.io": {"namespace": "ns", "secret": {"name": "c-exec"}}}),
            {},
            "has no uid",
        ),
        ({"sub": USER}, {}, "carries no Kubernetes binding"),
    ],
)
def test_a_token_without_a_usable_binding_says_why(
    payload: dict[str, Any], extra: dict[str, Any], problem: str
) -> None:
    binding, why = read_binding(jwt(payload), USER, extra)
    assert binding is None
    assert problem in why


def test_a_token_that_is_not_a_jwt_has_no_binding() -> None:
    assert read_binding("opaque-static-token", USER, {}) == (
        None,
        "the token is not a service account token",
    )
