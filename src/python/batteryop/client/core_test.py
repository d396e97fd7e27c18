"""The client's IO-free rules on plain dicts: bodies written, claims read, timing decided."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from batteryop.api import names, samples
from batteryop.api._compat import UTC  # 3.10 too (pythons_test)
from batteryop.api.claim import UNREAD_EXPIRY_GRACE
from batteryop.client import _core
from batteryop.client._models import Pending

NOW = datetime(2026, 12, 1, 1, 0, 0, tzinfo=UTC)
BOUND_AT = NOW
"""`claim`'s Bound claims were bound then; their lease expires five minutes later."""


def claim(
    phase: str | None = None,
    *,
    uid: str = "u1",
    conditions: list[dict[str, Any]] | None = None,
    deleting: bool = False,
    expiry: bool = True,
) -> Any:
    body = samples.sample_claim(name="c", pool="demo", namespace="ns")
    body["metadata"]["uid"] = uid
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-12-01T01:00:00Z"
    status: dict[str, Any] = {"conditions": conditions or []}
    if phase:
        status["phase"] = phase
    if phase == "Bound":
        status["boundTime"] = "2026-12-01T01:00:00Z"
        if expiry:
            status["leaseExpiresAt"] = "2026-12-01T01:05:00Z"
        status["microVM"] = {"uid": "vm-1"}
        status["host"] = {"nodeName": "host-a", "agentAddress": "10.0.0.1:10270"}
    body["status"] = status
    return _core.parse_claim(body)


def cond(type: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-01T01:00:00Z",
    }


@pytest.mark.req("CC-001")
def test_the_claim_names_the_pool_and_holder_and_generates_a_name_from_the_pool() -> None:
    body = _core.claim_body("ns", "demo", "sandbox", labels={"team": "a"})
    assert body["metadata"] == {"namespace": "ns", "generateName": "demo-", "labels": {"team": "a"}}
    assert body["spec"] == {"poolRef": {"name": "demo"}, "serviceAccountName": "sandbox"}
    assert _core.claim_body("ns", "demo", "sa", name="mine")["metadata"]["name"] == "mine"
    with pytest.raises(ValueError):
        _core.claim_body("ns", "", "sa")


@pytest.mark.req("CC-001")
def test_the_exec_secret_is_empty_and_owned_by_the_claim_uid() -> None:
    body = _core.exec_secret_body("c", "u1", "ns")
    assert body["metadata"]["name"] == names.exec_secret_name("c") == "c-exec"
    assert "data" not in body and "stringData" not in body
    (owner,) = body["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": names.API_VERSION,
        "kind": "MicroVMClaim",
        "name": "c",
        "uid": "u1",
    }


@pytest.mark.req("CC-002")
def test_the_token_request_has_the_agent_audience_and_binds_to_the_secret() -> None:
    spec = _core.token_request_body("c-exec", "s1", 600)["spec"]
    assert spec["audiences"] == [names.EXEC_AGENT_AUDIENCE]
    assert spec["expirationSeconds"] == 600
    assert spec["boundObjectRef"] == {
        "apiVersion": "v1",
        "kind": "Secret",
        "name": "c-exec",
        "uid": "s1",
    }


@pytest.mark.req("CC-011")
def test_a_token_is_refreshed_two_thirds_into_its_life() -> None:
    token = _core.read_token(
        {"status": {"token": "t", "expirationTimestamp": "2026-12-01T01:10:00Z"}}, NOW
    )
    assert token.refresh_at == NOW + timedelta(seconds=400)
    assert not token.due(NOW + timedelta(seconds=399))
    assert token.due(NOW + timedelta(seconds=400))
    assert "secret-value" not in repr(_core.Token("secret-value", NOW, NOW))


def test_a_token_is_never_refreshed_within_a_second_of_issue() -> None:
    token = _core.Token("t", NOW, NOW + timedelta(milliseconds=30))
    assert token.refresh_at == NOW + timedelta(seconds=1)


@pytest.mark.req("CC-010")
def test_the_renewal_sets_renew_time_with_the_uid_as_precondition() -> None:
    assert _core.renew_patch("u1", NOW) == {
        "metadata": {"uid": "u1"},
        "spec": {"renewTime": "2026-12-01T01:00:00.000000Z"},
    }


@pytest.mark.req("CC-010")
def test_the_heartbeat_interval_is_the_pools_or_the_default() -> None:
    pool = samples.demo_pool(namespace="ns")
    assert _core.heartbeat_interval(pool) == timedelta(seconds=10)
    pool["spec"]["lease"] = {"heartbeatInterval": "1.5s"}
    assert _core.heartbeat_interval(pool) == timedelta(seconds=1.5)
    assert _core.heartbeat_interval(None) == timedelta(seconds=10)


@pytest.mark.req("CC-003", "CC-004")
def test_a_claim_is_bound_only_with_its_microvm_and_node_and_else_says_why() -> None:
    waiting = claim("Pending", conditions=[cond("Bound", "False", "PoolExhausted", "none warm")])
    assert not _core.is_bound(waiting, NOW)
    p = _core.pending(waiting)
    assert p == Pending("PoolExhausted", "none warm")
    assert p.pool_exhausted
    bound = claim("Bound", conditions=[cond("Bound", "True", "Bound")])
    assert _core.is_bound(bound, BOUND_AT + timedelta(minutes=1))
    # EA-013: the agent runs a command only while the Lease is known to live. Before the
    # operator recorded battery's expiry, that is a grace after the bind, and then no longer.
    fresh = claim("Bound", conditions=[cond("Bound", "True", "Bound")], expiry=False)
    assert _core.is_bound(fresh, BOUND_AT + timedelta(seconds=1))
    assert not _core.is_bound(fresh, BOUND_AT + UNREAD_EXPIRY_GRACE)
    assert not _core.is_bound(bound, BOUND_AT + timedelta(minutes=5))  # expired
    assert _core.pending(bound) is None
    info = _core.claim_info(bound)
    assert (info.microvm_uid, info.node_name, info.agent_address) == (
        "vm-1",
        "host-a",
        "10.0.0.1:10270",
    )


@pytest.mark.req("CC-012")
def test_the_lease_is_lost_when_expired_deleted_deleting_or_replaced() -> None:
    assert _core.lost_reason(claim("Bound"), "u1") is None
    assert _core.lost_reason(None, "u1") == "was deleted"
    assert "re-created" in (_core.lost_reason(claim("Bound", uid="u2"), "u1") or "")
    assert _core.lost_reason(claim("Bound", deleting=True), "u1") == "is being deleted"
    expired = claim("Expired", conditions=[cond("Bound", "False", "LeaseExpired", "gone")])
    assert _core.lost_reason(expired, "u1") == "lost its lease (Expired): gone"


@pytest.mark.req("CC-013")
def test_host_not_ready_is_read_from_the_host_ready_condition() -> None:
    ready = claim("Bound", conditions=[cond("HostReady", "True", "Ready")])
    assert _core.host_not_ready(ready) is None
    sick = claim("Bound", conditions=[cond("HostReady", "False", "KVMUnavailable", "no kvm")])
    assert _core.host_not_ready(sick) == ("KVMUnavailable", "no kvm")
