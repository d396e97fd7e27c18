"""Every metric a deployable exports is a `MetricDef` (`batteryop.obs.catalog`), so the metrics
reference rendered from the definitions lists them all: no deployable or library calls
prometheus_client's metric constructors itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path("src/python/batteryop")
CONSTRUCTORS = frozenset(
    {
        "Counter",
        "Gauge",
        "Histogram",
        "Summary",
        "Info",
        "Enum",
        "CounterMetricFamily",
        "GaugeMetricFamily",
        "HistogramMetricFamily",
        "SummaryMetricFamily",
        "InfoMetricFamily",
    }
)
# The one place the constructors are called; the test harness's own metrics (the progress
# heartbeat, the control plane's) are not a component's and are not in the reference.
ALLOWED = {ROOT / "obs" / "catalog.py"}
HARNESS = ROOT / "testing"


def constructor_imports(path: Path) -> list[str]:
    """`prometheus_client` metric constructors `path` imports, as "line: name"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in CONSTRUCTORS]
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: {a.name}" for a in node.names if a.name == "prometheus_client"
            ]
    return found


@pytest.mark.req("DP-109")
def test_only_the_catalog_makes_metrics() -> None:
    sources = [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if not p.name.endswith("_test.py") and p not in ALLOWED and HARNESS not in p.parents
    ]
    assert len(sources) > 100, f"found only {len(sources)} modules under {ROOT}"
    offenders = {str(p): found for p in sources if (found := constructor_imports(p))}
    assert not offenders, (
        "these modules make metrics with prometheus_client directly; declare a MetricDef "
        f"(batteryop.obs.catalog) so the metrics reference lists it: {offenders}"
    )


def test_the_rule_sees_a_direct_constructor(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from prometheus_client import CollectorRegistry, Gauge\nimport os\n")
    assert constructor_imports(module) == ["1: Gauge"]
