"""The Grafana dashboard of an installation, generated with Grafana's own SDK (DP-111).

One row per concern (claims, the operator and battery, Hosts, the Exec Agents, the CSR
approver); every query names its metrics through their definitions (`batteryop.obs.exported`),
so the dashboard reads exactly what the components export (`dashboard_test.py` checks each
panel's query against them). The Prometheus data source is a dashboard variable, so the same
JSON imports into any Grafana 11.

`python -m batteryop.manifests.dashboard` prints the dashboard's JSON model;
`--configmap --namespace NS` wraps it in a ConfigMap labelled for Grafana's dashboard sidecar.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, Final

import yaml
from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from batteryop.api import names
from batteryop.manifests.render import APP_NAME, labels
from batteryop.obs.catalog import MetricDef
from batteryop.obs.exported import csr_approver, exec_agent, host_registry, operator

UID: Final = "battery-operator"
TITLE: Final = "battery-operator"
DATASOURCE: Final = DataSourceRef(type_val="prometheus", uid="${datasource}")
SIDECAR_LABEL: Final = "grafana_dashboard"
"""The label Grafana's Helm chart sidecar looks for on ConfigMaps holding dashboards."""


def _query(expr: str, legend: str = "") -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr)
    return query.legend_format(legend) if legend else query


def _p(quantile: float, histogram: MetricDef, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return (
        f"histogram_quantile({quantile}, sum by ({group}) "
        f"(rate({histogram.family}_bucket[5m])))"
    )


def _series(title: str, unit: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(8)
    for ref, query in zip("ABCDEFGH", queries, strict=False):
        panel = panel.with_target(query.ref_id(ref))
    return panel


def _stat(title: str, unit: str, query: prometheus.Dataquery) -> stat.Panel:
    panel = stat.Panel().title(title).unit(unit).datasource(DATASOURCE).height(4).span(4)
    return panel.with_target(query.ref_id("A"))


def _rate(counter: MetricDef, by: str) -> str:
    return f"sum by ({by}) (rate({counter.family}[5m]))"


def rows() -> list[tuple[str, list[Any]]]:
    """The dashboard's rows, each with its panels, in order."""
    op, ea, csr, reg = operator, exec_agent, csr_approver, host_registry
    return [
        (
            "Claims",
            [
                _stat(
                    "Oldest claim waiting",
                    "s",
                    _query(f"max({op.CLAIM_PENDING_OLDEST_SECONDS.family})"),
                ),
                _stat("Pools exhausted", "short", _query(f"max({op.POOLS_EXHAUSTED.family})")),
                _stat("Hosts not ready", "short", _query(f"max({op.HOSTS_NOT_READY.family})")),
                _series(
                    "Claims by phase",
                    "short",
                    _query(f"max by (phase) ({op.CLAIMS_BY_PHASE.family})", "{{phase}}"),
                ),
                _series(
                    "Time to Bound",
                    "s",
                    _query(_p(0.5, op.CLAIM_BIND_SECONDS), "p50"),
                    _query(_p(0.99, op.CLAIM_BIND_SECONDS), "p99"),
                ),
            ],
        ),
        (
            "Operator and battery",
            [
                _stat(
                    "battery Events stream",
                    "bool_yes_no",
                    _query(f"max({op.BATTERY_SUBSCRIBED.family})"),
                ),
                _series(
                    "Reconciles",
                    "ops",
                    _query(_rate(op.RECONCILE, "controller, result"), "{{controller}} {{result}}"),
                ),
                _series(
                    "Reconcile p99",
                    "s",
                    _query(_p(0.99, op.RECONCILE_SECONDS, "controller"), "{{controller}}"),
                ),
                _series(
                    "Work queue depth",
                    "short",
                    _query(f"max by (controller) ({op.WORKQUEUE_DEPTH.family})", "{{controller}}"),
                ),
                _series(
                    "battery call p99",
                    "s",
                    _query(_p(0.99, op.BATTERY_CALL_SECONDS, "rpc"), "{{rpc}}"),
                ),
                _series(
                    "battery call errors",
                    "ops",
                    _query(_rate(op.BATTERY_CALL_ERRORS, "rpc, code"), "{{rpc}} {{code}}"),
                ),
                _series(
                    "Operator cache entries",
                    "short",
                    _query(f"max by (map) ({op.CACHE_ENTRIES.family})", "{{map}}"),
                ),
            ],
        ),
        (
            "Hosts",
            [
                _stat("Hosts in battery", "short", _query(f"max({reg.HOSTS.family})")),
                _stat("Hosts published", "short", _query(f"max({reg.PUBLISHED_HOSTS.family})")),
                _stat(
                    "Host changes pending", "short", _query(f"max({reg.PENDING_CHANGES.family})")
                ),
                _series(
                    "HostAdmin calls",
                    "ops",
                    _query(_rate(reg.HOST_CALLS, "rpc, result"), "{{rpc}} {{result}}"),
                ),
                _series(
                    "battery restarts by the registry",
                    "short",
                    _query(f"sum(increase({reg.BATTERY_RESTARTS.family}[1h]))", "per hour"),
                ),
                _series(
                    "Drift repairs",
                    "short",
                    _query(
                        f"sum by (action) (increase({reg.DRIFT_REPAIRS.family}[1h]))", "{{action}}"
                    ),
                ),
            ],
        ),
        (
            "Exec Agents",
            [
                _series(
                    "Exec streams running",
                    "short",
                    _query(f"sum({ea.STREAMS.family})", "streams"),
                    _query(f"sum({ea.BOUND_CLAIMS.family})", "Bound claims"),
                ),
                _series(
                    "Exec phase p99",
                    "s",
                    _query(_p(0.99, ea.PHASE_SECONDS, "phase"), "{{phase}}"),
                ),
                _series(
                    "Refusals",
                    "ops",
                    _query(_rate(ea.REFUSALS, "check, code"), "{{check}} {{code}}"),
                ),
                _series(
                    "Certificate time left (least per kind)",
                    "s",
                    _query(
                        f"min by (certificate) ({ea.CERTIFICATE_EXPIRY.family})",
                        "{{certificate}}",
                    ),
                ),
                _series(
                    "Drain guards held",
                    "short",
                    _query(f"sum({ea.DRAIN_GUARD_HELD.family})", "held"),
                ),
            ],
        ),
        (
            "CSR approver",
            [
                _series(
                    "Requests",
                    "ops",
                    _query(_rate(csr.REQUESTS, "signer, outcome"), "{{signer}} {{outcome}}"),
                ),
                _series("Review p99", "s", _query(_p(0.99, csr.REVIEW_SECONDS), "p99")),
                _series(
                    "CAs loaded",
                    "short",
                    _query(f"min by (secret) ({csr.CA_LOADED.family})", "{{secret}}"),
                ),
                _series(
                    "Address pins",
                    "short",
                    _query(f"max({csr.ADDRESS_PINS.family})", "held"),
                    _query(
                        f"sum(increase({csr.ADDRESS_PINS_RELEASED.family}[1h]))",
                        "released per hour",
                    ),
                ),
            ],
        ),
    ]


def build() -> dict[str, Any]:
    """The dashboard's JSON model, as Grafana imports it."""
    board = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .tags([APP_NAME])
        .refresh("30s")
        .time("now-3h", "now")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
        )
    )
    ids = iter(range(1, 1000))  # Grafana links and edits panels by a unique id
    for title, panels in rows():
        board = board.with_row(dashboard.Row(title).id(next(ids)))
        for panel in panels:
            board = board.with_panel(panel.id(next(ids)))
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return model


def to_json() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def config_map(namespace: str) -> dict[str, Any]:
    """The dashboard in a ConfigMap labelled for Grafana's dashboard sidecar."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{APP_NAME}-dashboard",
            "namespace": namespace,
            "labels": {**labels("monitoring"), SIDECAR_LABEL: "1"},
        },
        "data": {f"{APP_NAME}.json": to_json()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batteryop.manifests.dashboard")
    parser.add_argument("--configmap", action="store_true", help="wrap it in a ConfigMap")
    parser.add_argument("--namespace", default=names.OPERATOR_NAMESPACE)
    args = parser.parse_args(argv)
    if args.configmap:
        sys.stdout.write(yaml.safe_dump(config_map(args.namespace), sort_keys=False))
    else:
        sys.stdout.write(to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
