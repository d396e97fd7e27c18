"""The host registry's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the battery RPC name and its result, the reason a Node was refused (a
`Refusal` value), what made the registry read battery's Host list again and which way a drift
was repaired. Node names are never labels: the log line of each repair names the Host.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from batteryop.obs.exported.host_registry import (
    BATTERY_HOST_API,
    BATTERY_RESTART_DURATION_SECONDS,
    BATTERY_RESTARTS,
    DRIFT_REPAIRS,
    HOST_CALLS,
    HOST_LIST_CHECKS,
    HOSTS,
    PENDING_CHANGES,
    PUBLISHED_HOSTS,
    REFUSED_REPORTS,
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
