"""The host registry's metrics, defined once; `host_registry.metrics` makes them."""

from __future__ import annotations

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

DEFINED = (
    HOSTS,
    PUBLISHED_HOSTS,
    PENDING_CHANGES,
    BATTERY_RESTARTS,
    BATTERY_RESTART_DURATION_SECONDS,
    HOST_CALLS,
    REFUSED_REPORTS,
    BATTERY_HOST_API,
    HOST_LIST_CHECKS,
    DRIFT_REPAIRS,
)
"""In the order the reference lists them."""
