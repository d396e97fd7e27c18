"""The host registry's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the battery RPC name and its result, the reason a Node was refused (a
`Refusal` value), what made the registry read battery's Host list again and which way a drift
was repaired. Node names are never labels: the log line of each repair names the Host.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from batteryop.obs.catalog import Kind, MetricDef

NAMESPACE = "battery_host_registry"


HOSTS = MetricDef(
    NAMESPACE,
    "hosts",
    Kind.GAUGE,
    "Hosts battery has, as the registry last saw it.",
)
PUBLISHED_HOSTS = MetricDef(
    NAMESPACE,
    "published_hosts",
    Kind.GAUGE,
    "Hosts in the published Host set.",
)
PENDING_CHANGES = MetricDef(
    NAMESPACE,
    "pending_changes",
    Kind.GAUGE,
    "Host changes waiting to settle or for the restart window.",
)
BATTERY_RESTARTS = MetricDef(
    NAMESPACE,
    "battery_restarts_total",
    Kind.COUNTER,
    "Restarts of battery the registry made.",
)
BATTERY_RESTART_DURATION_SECONDS = MetricDef(
    NAMESPACE,
    "battery_restart_duration_seconds",
    Kind.HISTOGRAM,
    "From signalling battery to it answering.",
)
HOST_CALLS = MetricDef(
    NAMESPACE,
    "host_calls_total",
    Kind.COUNTER,
    "HostAdmin calls made to battery, by RPC and result.",
    ("rpc", "result"),
)
REFUSED_REPORTS = MetricDef(
    NAMESPACE,
    "refused_reports_total",
    Kind.COUNTER,
    "Node reports refused for an invalid flintlockd address.",
)
BATTERY_HOST_API = MetricDef(
    NAMESPACE,
    "battery_host_api",
    Kind.GAUGE,
    "1 while battery answers AddHost/RemoveHost (no restarts).",
)
HOST_LIST_CHECKS = MetricDef(
    NAMESPACE,
    "host_list_checks_total",
    Kind.COUNTER,
    "Reads of battery's Host list (ListHosts) against the Hosts the registry added, by "
    "trigger: start, reconnect (battery's connection made again) or periodic (IN-105).",
    ("trigger",),
)
DRIFT_REPAIRS = MetricDef(
    NAMESPACE,
    "drift_repairs_total",
    Kind.COUNTER,
    "Hosts battery had lost that were added again (action=add), and Hosts the registry "
    "had removed that battery held again and were removed again (action=remove).",
    ("action",),
)


class RegistryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.hosts = HOSTS.gauge(registry)
        self.published = PUBLISHED_HOSTS.gauge(registry)
        self.pending = PENDING_CHANGES.gauge(registry)
        self.restarts = BATTERY_RESTARTS.counter(registry)
        self.restart_seconds = BATTERY_RESTART_DURATION_SECONDS.histogram(registry)
        self.host_calls = HOST_CALLS.counter(registry)
        self.refused = REFUSED_REPORTS.counter(registry)
        self.host_api = BATTERY_HOST_API.gauge(registry)
        self.host_checks = HOST_LIST_CHECKS.counter(registry)
        self.drift_repairs = DRIFT_REPAIRS.counter(registry)
