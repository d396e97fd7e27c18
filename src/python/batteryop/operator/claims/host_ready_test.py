from __future__ import annotations

import pytest

from batteryop.api import names
from batteryop.api.conditions import MAX_MESSAGE_LENGTH, ClaimReason, HostReportReason
from batteryop.operator.claims.host_ready import host_report

READY = names.EXEC_AGENT_READY_ANNOTATION
REASON = names.EXEC_AGENT_REASON_ANNOTATION
MESSAGE = names.EXEC_AGENT_MESSAGE_ANNOTATION


@pytest.mark.req("CL-050")
def test_a_ready_report_is_mirrored() -> None:
    report = {READY: "true", REASON: HostReportReason.READY, MESSAGE: "checks pass"}
    assert host_report("n", True, report) == (True, "Ready", "checks pass")


@pytest.mark.req("CL-051")
def test_a_not_ready_report_is_mirrored() -> None:
    report = {READY: "false", REASON: HostReportReason.THIN_POOL_MISSING, MESSAGE: "no pool"}
    assert host_report("n", True, report) == (False, "ThinPoolMissing", "no pool")


@pytest.mark.req("CL-052")
def test_no_node_and_no_report_are_named() -> None:
    assert host_report("n", False, {})[:2] == (False, ClaimReason.NODE_NOT_FOUND)
    no_report = {names.EXEC_AGENT_ADDRESS_ANNOTATION: "10.0.0.7:10270"}
    assert host_report("n", True, no_report)[:2] == (False, ClaimReason.NO_NODE_REPORT)


@pytest.mark.req("CL-053")
@pytest.mark.parametrize("value", ["True", "TRUE", "yes", "1", "", " true"])
def test_only_the_value_true_counts_as_ready(value: str) -> None:
    assert host_report("n", True, {READY: value})[0] is False


@pytest.mark.req("CL-053")
@pytest.mark.parametrize("reason", ["", "not a reason", "9Lives", "x" * 1025])
def test_a_reason_the_crd_would_refuse_is_replaced(reason: str) -> None:
    assert host_report("n", True, {READY: "true", REASON: reason})[1] == ClaimReason.READY
    not_ready = host_report("n", True, {READY: "false", REASON: reason})[1]
    assert not_ready == ClaimReason.HOST_NOT_READY


@pytest.mark.req("CL-053")
def test_the_message_is_cut_to_what_the_crd_accepts() -> None:
    message = host_report("n", True, {READY: "false", MESSAGE: "m" * 50_000})[2]
    assert message == "m" * MAX_MESSAGE_LENGTH
