"""Prometheus alert rules for an installation, as data: one definition, two renderings (DP-110).

`rules_file()` is a Prometheus rules file (`rule_files:` of a plain Prometheus, and what
`promtool test rules` reads); `prometheus_rule(namespace)` is the same groups as a
`monitoring.coreos.com/v1` `PrometheusRule` for clusters that run prometheus-operator. Every
expression names its metrics through their definitions (`batteryop.obs.exported`), so a renamed
metric cannot leave a rule reading nothing, and every rule links its runbook on the Operations
page (`docs/operations.md#<anchor>`, checked by `alerts_test.py`).

The thresholds are where a person should look, not where the system fails: each rule's `for`
keeps one slow reconcile or one reconnect from paging anyone.

`python -m batteryop.manifests.alerts rules` prints the rules file;
`python -m batteryop.manifests.alerts prometheus-rule --namespace NS` prints the object.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from batteryop.api import names
from batteryop.api.conditions import ClaimReason, PoolConditionType
from batteryop.manifests.render import APP_NAME, labels
from batteryop.obs.exported import csr_approver, exec_agent, operator

RUNBOOKS: Final = "operations.md"
"""The docs page holding one runbook section per alert, its anchor the alert's name in lower
case (mkdocs' `toc` slugs)."""

PENDING_SECONDS: Final = 300
"""A claim waiting longer than this to be Bound is worth a look: a bind takes milliseconds."""
CERTIFICATE_LEFT_SECONDS: Final = 6 * 3600
"""An Exec Agent certificate is renewed when 35-45 % of its validity is left (8.4-10.8 h of the
24 h client certificate, EA-063); 6 h left means renewal has failed for hours."""
WORKQUEUE_BACKLOG: Final = 100
REFUSALS_PER_SECOND: Final = 1.0
BATTERY_ERRORS_PER_SECOND: Final = 0.1


@dataclass(frozen=True)
class Alert:
    """One alerting rule: `expr` fires once it has held for `for_`."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook": f"{RUNBOOKS}#{self.name.lower()}",
            },
        }


GROUPS: Final[tuple[tuple[str, tuple[Alert, ...]], ...]] = (
    (
        "battery-operator.claims",
        (
            Alert(
                "BatteryClaimPendingTooLong",
                f"max({operator.CLAIM_PENDING_OLDEST_SECONDS.family}) > {PENDING_SECONDS}",
                "2m",
                "warning",
                "A MicroVMClaim has waited more than 5 minutes to be Bound.",
                "The oldest claim not yet Bound has waited {{ $value | humanizeDuration }}. "
                "Its Bound condition's reason says why ("
                f"{ClaimReason.POOL_EXHAUSTED}, {ClaimReason.POOL_NOT_FOUND}, "
                f"{ClaimReason.POOL_DELETING}, {ClaimReason.HOST_CORDONED}, "
                f"{ClaimReason.BATTERY_UNAVAILABLE}).",
            ),
            Alert(
                "BatteryPoolExhausted",
                f"max({operator.POOLS_EXHAUSTED.family}) > 0",
                "5m",
                "warning",
                "A Pool has had no MicroVM available for 5 minutes.",
                "{{ $value }} Pool(s) report "
                f"{PoolConditionType.EXHAUSTED}=True: claims on them stay Pending until "
                "battery has a MicroVM free.",
            ),
            Alert(
                "BatteryOperatorWorkQueueBacklog",
                f"max by (controller) ({operator.WORKQUEUE_DEPTH.family}) > {WORKQUEUE_BACKLOG}",
                "10m",
                "warning",
                "The operator's {{ $labels.controller }} work queue is backing up.",
                "{{ $value }} objects have waited in the {{ $labels.controller }} queue for 10 "
                "minutes: the operator reconciles slower than objects change.",
            ),
        ),
    ),
    (
        "battery-operator.battery",
        (
            Alert(
                "BatteryUnreachable",
                f"max({operator.BATTERY_SUBSCRIBED.family}) == 0",
                "2m",
                "critical",
                "The operator has had no battery Events stream for 2 minutes.",
                "No operator replica is subscribed to battery: claims are not bound or "
                "released, and Leases are not renewed.",
            ),
            Alert(
                "BatteryCallErrors",
                f"sum by (rpc, code) (rate({operator.BATTERY_CALL_ERRORS.family}[5m])) "
                f"> {BATTERY_ERRORS_PER_SECOND}",
                "10m",
                "warning",
                "battery answers {{ $labels.rpc }} with {{ $labels.code }}.",
                "{{ $value | humanize }} failed {{ $labels.rpc }} calls per second for 10 "
                "minutes.",
            ),
        ),
    ),
    (
        "battery-operator.hosts",
        (
            Alert(
                "BatteryHostNotReady",
                f"max({operator.HOSTS_NOT_READY.family}) > 0",
                "5m",
                "warning",
                "A Host's Exec Agent reports it not ready.",
                "{{ $value }} Host Node(s) labelled "
                f"{names.HOST_LABEL}={names.HOST_LABEL_VALUE} have no ready Exec Agent report: "
                "claims on them cannot exec.",
            ),
        ),
    ),
    (
        "battery-operator.certificates",
        (
            Alert(
                "BatteryExecAgentCertificateNotRenewed",
                f"min by (instance, certificate) ({exec_agent.CERTIFICATE_EXPIRY.family}) "
                f"< {CERTIFICATE_LEFT_SECONDS}",
                "10m",
                "warning",
                "An Exec Agent's {{ $labels.certificate }} certificate is close to expiry.",
                "{{ $labels.instance }}'s {{ $labels.certificate }} certificate expires in "
                "{{ $value | humanizeDuration }}: its renewal has been failing for hours.",
            ),
            Alert(
                "BatteryCSRApproverCANotLoaded",
                f"min by (secret) ({csr_approver.CA_LOADED.family}) == 0",
                "5m",
                "critical",
                "The CSR approver cannot use the CA in {{ $labels.secret }}.",
                "Requests for that signer are not signed: Exec Agents cannot renew their "
                "certificates.",
            ),
        ),
    ),
    (
        "battery-operator.exec",
        (
            Alert(
                "BatteryExecRefusals",
                f"sum by (check, code) (rate({exec_agent.REFUSALS.family}[5m])) "
                f"> {REFUSALS_PER_SECOND}",
                "10m",
                "warning",
                "Exec Agents refuse calls at the {{ $labels.check }} check.",
                "{{ $value | humanize }} refusals per second with {{ $labels.code }} for 10 "
                "minutes.",
            ),
        ),
    ),
)

ALERTS: Final = tuple(alert for _, alerts in GROUPS for alert in alerts)


def groups() -> list[dict[str, Any]]:
    return [{"name": name, "rules": [a.rule() for a in alerts]} for name, alerts in GROUPS]


def rules_file() -> str:
    """The rules file, as Prometheus and promtool read it."""
    return yaml.safe_dump({"groups": groups()}, sort_keys=False, width=1000)


def prometheus_rule(namespace: str) -> dict[str, Any]:
    """The same rules as a prometheus-operator `PrometheusRule` in `namespace`."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": APP_NAME,
            "namespace": namespace,
            "labels": labels("monitoring"),
        },
        "spec": {"groups": groups()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batteryop.manifests.alerts")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("rules", help="the Prometheus rules file")
    rule = sub.add_parser("prometheus-rule", help="the PrometheusRule object")
    rule.add_argument("--namespace", default=names.OPERATOR_NAMESPACE)
    args = parser.parse_args(argv)
    if args.what == "rules":
        sys.stdout.write(rules_file())
    else:
        sys.stdout.write(yaml.safe_dump(prometheus_rule(args.namespace), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
