from __future__ import annotations

import pytest

from batteryop.api import names
from batteryop.api.conditions import (
    MAX_MESSAGE_LENGTH,
    ClaimReason,
    HostReportReason,
    NodeReadiness,
    node_readiness,
)
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


@pytest.mark.req("CL-105")
@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_a_node_not_ready_by_its_own_condition_is_not_ready_whatever_the_report(
    status: str,
) -> None:
    report = {READY: "true", REASON: HostReportReason.READY, MESSAGE: "checks pass"}
    readiness = NodeReadiness(status, "NodeStatusUnknown", "Kubelet stopped posting node status.")
    ready, reason, message = host_report("n", True, report, readiness)
    assert (ready, reason) == (False, ClaimReason.NODE_NOT_READY)
    assert status in message and "Kubelet stopped posting node status." in message
    # A Ready Node, or one without the condition yet, leaves the report to decide.
    assert host_report("n", True, report, NodeReadiness("True", "KubeletReady", ""))[0] is True
    assert host_report("n", True, report, None)[0] is True


@pytest.mark.req("CL-105")
def test_a_nodes_ready_condition_is_read_from_its_status() -> None:
    body = {
        "status": {
            "conditions": [
                {"type": "DiskPressure", "status": "False"},
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "m",
                },
            ]
        }
    }
    assert node_readiness(body) == NodeReadiness("Unknown", "NodeStatusUnknown", "m")
    assert node_readiness({"status": {}}) is None
    assert node_readiness(None) is None
    assert node_readiness({"status": {"conditions": "bad"}}) is None


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
