"""Every Prometheus metric as data: one `MetricDef` per metric, defined once (DP-109).

`batteryop.obs.exported` declares every component's metrics as `MetricDef` constants (a
library, so the alert rules, the dashboard and the reference can name them), and each
component's metrics module makes them on the registry its entry point created (`counter`,
`gauge`, `histogram`, or `gauge_family` for a collector read at scrape time). Nothing in a deployable calls
`prometheus_client`'s constructors itself (`tests/repo/metrics_reference_test.py` checks the
source), so the metrics reference (`docs/metrics.md`, rendered by `reference` through
`docsite/metrics_hook.py` when the site is built) lists every metric a component can export: a metric cannot be added without its line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from batteryop.api._compat import StrEnum


class Kind(StrEnum):
    """The Prometheus metric type, as the exposition's `# TYPE` line names it."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricDef:
    """One metric: its name (without the namespace), type, help text, label names and, for a
    histogram, its buckets (None: prometheus_client's defaults)."""

    namespace: str
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    @property
    def family(self) -> str:
        """The metric family's name as scraped: a counter's ends in `_total`."""
        full = f"{self.namespace}_{self.name}"
        if self.kind is Kind.COUNTER:
            return full.removesuffix("_total") + "_total"
        return full

    def counter(self, registry: CollectorRegistry) -> Counter:
        self._expect(Kind.COUNTER)
        return Counter(
            self.name, self.help, self.labels, namespace=self.namespace, registry=registry
        )

    def gauge(self, registry: CollectorRegistry) -> Gauge:
        self._expect(Kind.GAUGE)
        return Gauge(self.name, self.help, self.labels, namespace=self.namespace, registry=registry)

    def histogram(self, registry: CollectorRegistry) -> Histogram:
        self._expect(Kind.HISTOGRAM)
        if self.buckets is None:
            return Histogram(
                self.name, self.help, self.labels, namespace=self.namespace, registry=registry
            )
        return Histogram(
            self.name,
            self.help,
            self.labels,
            namespace=self.namespace,
            registry=registry,
            buckets=self.buckets,
        )

    def gauge_family(self) -> GaugeMetricFamily:
        """An empty gauge family for a `Collector` that reads its values at scrape time."""
        self._expect(Kind.GAUGE)
        return GaugeMetricFamily(self.family, self.help, labels=list(self.labels))

    def _expect(self, kind: Kind) -> None:
        if self.kind is not kind:
            raise TypeError(f"metric {self.family} is a {self.kind}, not a {kind}")


def reference(sections: Sequence[tuple[str, Iterable[MetricDef]]]) -> str:
    """The metrics reference as Markdown: per component, a table of every metric's scraped
    name, type, labels and meaning."""
    lines: list[str] = []
    for title, defs in sections:
        lines += [
            f"## {title}",
            "",
            "| Metric | Type | Labels | Meaning |",
            "| --- | --- | --- | --- |",
        ]
        for d in sorted(defs, key=lambda d: d.family):
            labels = ", ".join(f"`{label}`" for label in d.labels) or "—"
            meaning = " ".join(d.help.split()).replace("|", "\\|")
            lines.append(f"| `{d.family}` | {d.kind} | {labels} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


__all__ = ["Kind", "MetricDef", "reference"]
