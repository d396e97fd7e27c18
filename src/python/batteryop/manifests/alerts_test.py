"""The alert rules, tested by Prometheus' own `promtool test rules`: each alert fires for the
right reason, with its annotations rendered, and stays quiet just below its threshold or
before its `for` has passed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from batteryop.api import names
from batteryop.manifests import alerts
from batteryop.obs import exported

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian's prometheus package; .ci/run installs it)",
)

Series = tuple[str, str]
Expected = list[tuple[dict[str, str], dict[str, str]]]


def case(alert: str, series: list[Series], at: str, expected: Expected, *, id: str) -> Any:
    return pytest.param(alert, series, at, expected, id=id)


def expect_notes(alert: str, summary: str, description: str) -> dict[str, str]:
    return {
        "summary": summary,
        "description": description,
        "runbook": f"operations.md#{alert.lower()}",
    }


OP = "battery_operator"
PENDING = expect_notes(
    "BatteryClaimPendingTooLong",
    "A MicroVMClaim has waited more than 5 minutes to be Bound.",
    "The oldest claim not yet Bound has waited 7m 40s. Its Bound condition's reason says why "
    "(PoolExhausted, PoolNotFound, PoolDeleting, HostCordoned, BatteryUnavailable).",
)

CASES = [
    case(
        "BatteryClaimPendingTooLong",
        [(f'{OP}_claim_pending_oldest_seconds{{instance="op-0"}}', "100+60x10")],
        "6m",
        [({"severity": "warning"}, PENDING)],
        id="pending: 460 s waited, over 300 s for 2 minutes",
    ),
    case(
        "BatteryClaimPendingTooLong",
        [(f'{OP}_claim_pending_oldest_seconds{{instance="op-0"}}', "100+60x10")],
        "5m",
        [],
        id="pending: over 300 s for only 1 minute",
    ),
    case(
        "BatteryClaimPendingTooLong",
        [(f'{OP}_claim_pending_oldest_seconds{{instance="op-0"}}', "0x10")],
        "10m",
        [],
        id="pending: nothing waits",
    ),
    case(
        "BatteryPoolExhausted",
        [(f'{OP}_pools_exhausted{{instance="op-0"}}', "2x10")],
        "6m",
        [
            (
                {"severity": "warning"},
                expect_notes(
                    "BatteryPoolExhausted",
                    "A Pool has had no MicroVM available for 5 minutes.",
                    "2 Pool(s) report Exhausted=True: claims on them stay Pending until "
                    "battery has a MicroVM free.",
                ),
            )
        ],
        id="exhausted: two Pools for 6 minutes",
    ),
    case(
        "BatteryPoolExhausted",
        [(f'{OP}_pools_exhausted{{instance="op-0"}}', "0 0 1 0 1 0 1 0 1 0")],
        "9m",
        [],
        id="exhausted: a Pool that keeps refilling",
    ),
    case(
        "BatteryOperatorWorkQueueBacklog",
        [
            (f'{OP}_workqueue_depth{{instance="op-0",controller="claims"}}', "150x15"),
            (f'{OP}_workqueue_depth{{instance="op-0",controller="pools"}}', "3x15"),
        ],
        "11m",
        [
            (
                {"severity": "warning", "controller": "claims"},
                expect_notes(
                    "BatteryOperatorWorkQueueBacklog",
                    "The operator's claims work queue is backing up.",
                    "150 objects have waited in the claims queue for 10 minutes: the operator "
                    "reconciles slower than objects change.",
                ),
            )
        ],
        id="workqueue: claims backed up, pools not",
    ),
    case(
        "BatteryUnreachable",
        [
            (f'{OP}_battery_subscribed{{instance="op-0"}}', "1 1 0 0 0 0 0"),
            (f'{OP}_battery_subscribed{{instance="op-1"}}', "0x6"),
        ],
        "5m",
        [
            (
                {"severity": "critical"},
                expect_notes(
                    "BatteryUnreachable",
                    "The operator has had no battery Events stream for 2 minutes.",
                    "No operator replica is subscribed to battery: claims are not bound or "
                    "released, and Leases are not renewed.",
                ),
            )
        ],
        id="battery: no replica subscribed for 3 minutes",
    ),
    case(
        "BatteryUnreachable",
        [
            (f'{OP}_battery_subscribed{{instance="op-0"}}', "1x6"),
            (f'{OP}_battery_subscribed{{instance="op-1"}}', "0x6"),
        ],
        "5m",
        [],
        id="battery: the leader is subscribed, the standby is not",
    ),
    case(
        "BatteryCallErrors",
        [
            (
                f'{OP}_battery_call_errors_total{{instance="op-0",rpc="ClaimVM",code="UNAVAILABLE"}}',
                "0+30x20",
            )
        ],
        "16m",
        [
            (
                {"severity": "warning", "rpc": "ClaimVM", "code": "UNAVAILABLE"},
                expect_notes(
                    "BatteryCallErrors",
                    "battery answers ClaimVM with UNAVAILABLE.",
                    "500m failed ClaimVM calls per second for 10 minutes.",
                ),
            )
        ],
        id="battery errors: 0.5 per second",
    ),
    case(
        "BatteryCallErrors",
        [
            (
                f'{OP}_battery_call_errors_total{{instance="op-0",rpc="ClaimVM",code="UNAVAILABLE"}}',
                "0+3x20",
            )
        ],
        "16m",
        [],
        id="battery errors: 0.05 per second",
    ),
    case(
        "BatteryHostNotReady",
        [(f'{OP}_hosts_not_ready{{instance="op-0"}}', "1x10")],
        "6m",
        [
            (
                {"severity": "warning"},
                expect_notes(
                    "BatteryHostNotReady",
                    "A Host's Exec Agent reports it not ready.",
                    f"1 Host Node(s) labelled {names.HOST_LABEL}={names.HOST_LABEL_VALUE} have "
                    "no ready Exec Agent report: claims on them cannot exec.",
                ),
            )
        ],
        id="hosts: one not ready for 6 minutes",
    ),
    case(
        "BatteryExecAgentCertificateNotRenewed",
        [
            (
                f'{OP}_exec_agent_certificate_expiry_seconds{{instance="h1",certificate="client"}}',
                "25000-600x20",
            ),
            (
                f'{OP}_exec_agent_certificate_expiry_seconds{{instance="h2",certificate="client"}}',
                "80000-60x20",
            ),
        ],
        "16m",
        [
            (
                {"severity": "warning", "instance": "h1", "certificate": "client"},
                expect_notes(
                    "BatteryExecAgentCertificateNotRenewed",
                    "An Exec Agent's client certificate is close to expiry.",
                    "h1's client certificate expires in 4h 16m 40s: its renewal has been "
                    "failing for hours.",
                ),
            )
        ],
        id="certificates: h1 not renewed, h2 fine",
    ),
    case(
        "BatteryCSRApproverCANotLoaded",
        [
            ('battery_csr_approver_ca_loaded{instance="a",secret="flintlockd-client-ca"}', "0x10"),
            ('battery_csr_approver_ca_loaded{instance="a",secret="exec-agent-serving-ca"}', "1x10"),
        ],
        "6m",
        [
            (
                {"severity": "critical", "secret": "flintlockd-client-ca"},
                expect_notes(
                    "BatteryCSRApproverCANotLoaded",
                    "The CSR approver cannot use the CA in flintlockd-client-ca.",
                    "Requests for that signer are not signed: Exec Agents cannot renew their "
                    "certificates.",
                ),
            )
        ],
        id="csr approver: one CA not loaded",
    ),
    case(
        "BatteryExecRefusals",
        [
            (
                f'{OP}_exec_agent_refusals_total{{instance="h1",check="holder",code="PERMISSION_DENIED"}}',
                "0+120x20",
            ),
            (
                f'{OP}_exec_agent_refusals_total{{instance="h2",check="holder",code="PERMISSION_DENIED"}}',
                "0+60x20",
            ),
            (
                f'{OP}_exec_agent_refusals_total{{instance="h1",check="claim",code="FAILED_PRECONDITION"}}',
                "0+6x20",
            ),
        ],
        "16m",
        [
            (
                {"severity": "warning", "check": "holder", "code": "PERMISSION_DENIED"},
                expect_notes(
                    "BatteryExecRefusals",
                    "Exec Agents refuse calls at the holder check.",
                    "3 refusals per second with PERMISSION_DENIED for 10 minutes.",
                ),
            )
        ],
        id="refusals: 3 per second across Hosts at one check",
    ),
]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(alerts.rules_file())
    checked = promtool("check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in checked.stdout


@needs_promtool
@pytest.mark.req("DP-110")
@pytest.mark.parametrize(("alert", "series", "at", "expected"), CASES)
def test_alert(
    tmp_path: Path, alert: str, series: list[Series], at: str, expected: Expected
) -> None:
    (tmp_path / "rules.yaml").write_text(alerts.rules_file())
    unit = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": alert,
                        "exp_alerts": [
                            {"exp_labels": labels, "exp_annotations": notes}
                            for labels, notes in expected
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit, sort_keys=False))
    ran = promtool("test", "rules", tmp_path / "test.yaml")
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_every_alert_has_a_case_that_fires_it() -> None:
    fired = {p.values[0] for p in CASES if p.values[3]}
    assert fired == {a.name for a in alerts.ALERTS}


def test_every_rule_reads_metrics_the_components_export() -> None:
    families = {d.family for d in exported.ALL}
    for alert in alerts.ALERTS:
        read = set(re.findall(r"\bbattery_[a-z_]+\b", alert.expr))
        assert read and read <= families, (alert.name, read - families)


@pytest.mark.req("DP-110")
def test_every_alert_has_its_runbook() -> None:
    page = Path("docs/operations.md").read_text()
    headings = {line.lstrip("#").strip() for line in page.splitlines() if line.startswith("#")}
    for alert in alerts.ALERTS:
        assert alert.name in headings, f"docs/operations.md has no runbook for {alert.name}"


@pytest.mark.req("DP-110")
def test_the_prometheus_rule_carries_the_same_groups() -> None:
    rule = alerts.prometheus_rule("ops")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "ops"
    assert rule["spec"]["groups"] == yaml.safe_load(alerts.rules_file())["groups"]


def test_the_command_prints_both_renderings(capsys: pytest.CaptureFixture[str]) -> None:
    assert alerts.main(["rules"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"groups": alerts.groups()}
    assert alerts.main(["prometheus-rule", "--namespace", "mon"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == alerts.prometheus_rule("mon")
