from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batteryop.api import names, samples
from batteryop.api.claim import UNREAD_EXPIRY_GRACE, ClaimSpec, ClaimStatus, MicroVMClaim
from batteryop.api.conditions import ClaimConditionType, ClaimPhase, ClaimReason, set_condition
from batteryop.api.errors import MalformedObjectError
from batteryop.api.meta import ObjectMeta

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def bound_body() -> dict[str, object]:
    body = samples.sample_claim(namespace="team-a")
    body["metadata"].update(  # type: ignore[attr-defined]
        uid="3f1c", generation=1, finalizers=[names.CLAIM_FINALIZER]
    )
    body["spec"]["renewTime"] = "2026-05-01T12:00:10.123456Z"  # type: ignore[index]
    body["status"] = {
        "phase": "Bound",
        "leaseID": "lease-1",
        "microVM": {"uid": "01HVM"},
        "host": {"nodeName": "host-1", "agentAddress": "10.0.0.5:10270"},
        "boundTime": "2026-05-01T12:00:00Z",
        "leaseExpiresAt": "2026-05-01T12:00:40Z",
        "observedRenewTime": "2026-05-01T12:00:10.123456Z",
        "conditions": [
            {
                "type": "Bound",
                "status": "True",
                "reason": "Bound",
                "message": "Leased MicroVM 01HVM on Node host-1",
                "lastTransitionTime": "2026-05-01T12:00:00Z",
            }
        ],
    }
    return body


def test_a_bound_claim_reads_as_written() -> None:
    claim = MicroVMClaim.from_dict(bound_body())
    assert claim.spec == ClaimSpec(
        pool_name="pool-sample",
        service_account_name="sandbox",
        renew_time=datetime(2026, 5, 1, 12, 0, 10, 123456, tzinfo=UTC),
    )
    s = claim.status
    assert s.phase is ClaimPhase.BOUND
    assert (s.lease_id, s.microvm_uid, s.node_name, s.agent_address) == (
        "lease-1",
        "01HVM",
        "host-1",
        "10.0.0.5:10270",
    )
    assert s.lease_expires_at == T0 + timedelta(seconds=40)
    bound = s.condition(ClaimConditionType.BOUND)
    assert bound is not None and bound.is_true and bound.reason == ClaimReason.BOUND
    assert claim.metadata.has_finalizer(names.CLAIM_FINALIZER)
    assert not claim.renewal_pending


def test_a_claim_renders_back_to_its_body() -> None:
    body = bound_body()
    assert MicroVMClaim.from_dict(body).to_dict() == body


def test_a_new_claim_has_no_status_and_renders_none() -> None:
    claim = MicroVMClaim.from_dict(samples.sample_claim())
    assert claim.status == ClaimStatus()
    assert "status" not in claim.to_dict()
    assert claim.to_dict() == samples.sample_claim()


def test_a_renewal_is_pending_while_renew_time_differs_from_the_relayed_one() -> None:
    claim = MicroVMClaim.from_dict(bound_body())
    renewed = ClaimSpec(
        claim.spec.pool_name, claim.spec.service_account_name, T0 + timedelta(seconds=20)
    )
    assert MicroVMClaim(claim.metadata, renewed, claim.status).renewal_pending
    never = MicroVMClaim.from_dict(samples.sample_claim())
    assert not never.renewal_pending


@pytest.mark.req("EA-013")
def test_a_lease_is_good_until_its_recorded_expiry_or_briefly_after_the_bind() -> None:
    bound = datetime(2026, 12, 1, 1, 0, 0, tzinfo=UTC)
    expires = bound + timedelta(seconds=30)
    recorded = ClaimStatus(phase=ClaimPhase.BOUND, bound_time=bound, lease_expires_at=expires)
    assert recorded.lease_good_until() == expires
    # Before the operator read battery's expiry: less than the shortest Lease (PO-104) past
    # the bind, leaving room for the judging Host's clock.
    unread = ClaimStatus(phase=ClaimPhase.BOUND, bound_time=bound)
    assert unread.lease_good_until() == bound + UNREAD_EXPIRY_GRACE
    assert timedelta(0) < UNREAD_EXPIRY_GRACE < timedelta(seconds=2)
    assert ClaimStatus(phase=ClaimPhase.BOUND).lease_good_until() is None
    assert ClaimStatus().lease_good_until() is None


def test_the_exec_secret_and_the_holder_follow_the_claim() -> None:
    claim = MicroVMClaim.from_dict(bound_body())
    assert claim.exec_secret_name == "claim-sample-exec"
    assert claim.holder == "system:serviceaccount:team-a:sandbox"


def test_an_unknown_phase_names_the_field() -> None:
    body = bound_body()
    body["status"]["phase"] = "Released"  # type: ignore[index]
    with pytest.raises(MalformedObjectError) as err:
        MicroVMClaim.from_dict(body)
    assert err.value.path == "status.phase"
    assert err.value.kind == names.CLAIM_KIND


def test_a_claim_without_pool_names_the_field() -> None:
    body = samples.sample_claim()
    del body["spec"]["poolRef"]
    with pytest.raises(MalformedObjectError, match=r"spec\.poolRef"):
        MicroVMClaim.from_dict(body)


text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
maybe_text = st.none() | text
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
seconds = instants.map(lambda t: t.replace(microsecond=0))

claims = st.builds(
    MicroVMClaim,
    metadata=st.builds(ObjectMeta, name=text, namespace=text, uid=st.uuids().map(str)),
    spec=st.builds(ClaimSpec, text, text, st.none() | instants),
    status=st.builds(
        ClaimStatus,
        phase=st.none() | st.sampled_from(ClaimPhase),
        lease_id=maybe_text,
        microvm_uid=maybe_text,
        node_name=maybe_text,
        agent_address=maybe_text,
        bound_time=st.none() | seconds,
        lease_expires_at=st.none() | seconds,
        observed_renew_time=st.none() | instants,
        conditions=st.lists(
            st.tuples(st.sampled_from(ClaimConditionType), st.booleans(), seconds),
            max_size=4,
            unique_by=lambda c: c[0],
        ).map(
            lambda items: tuple(
                c
                for t, ok, when in items
                for c in set_condition((), t, ok, ClaimReason.SYNCED, "", when)
            )
        ),
    ),
)


@given(claims)
def test_a_claim_round_trips_through_its_body(claim: MicroVMClaim) -> None:
    assert MicroVMClaim.from_dict(claim.to_dict()) == claim
