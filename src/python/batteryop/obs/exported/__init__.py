"""Every metric the components export, as `catalog.MetricDef`s, one module per component.

The components make their metrics from these definitions; the metrics reference
(`docs/metrics.md`), the alert rules (`manifests/alerts.py`) and the dashboard name them from
here, so a metric's name, type, labels and meaning are written once.
"""

from __future__ import annotations

from batteryop.obs.catalog import MetricDef
from batteryop.obs.exported import csr_approver, exec_agent, host_registry, operator

SECTIONS: tuple[tuple[str, tuple[MetricDef, ...]], ...] = (
    ("Operator", operator.DEFINED),
    ("Exec Agent", exec_agent.DEFINED),
    ("CSR approver", csr_approver.DEFINED),
    ("Host registry", host_registry.DEFINED),
)
"""The metrics reference's sections: each component's metrics."""

ALL: tuple[MetricDef, ...] = tuple(d for _, defs in SECTIONS for d in defs)
