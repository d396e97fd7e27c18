"""The host registry's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the battery RPC name and its result, the reason a Node was refused (a
`Refusal` value), what made the registry read battery's Host list again and which way a drift
was repaired. Node names are never labels: the log line of each repair names the Host.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

NAMESPACE = "battery_host_registry"


class RegistryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.hosts = Gauge(
            "hosts",
            "Hosts battery has, as the registry last saw it.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.published = Gauge(
            "published_hosts",
            "Hosts in the published Host set.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.pending = Gauge(
            "pending_changes",
            "Host changes waiting to settle or for the restart window.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.restarts = Counter(
            "battery_restarts_total",
            "Restarts of battery the registry made.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.restart_seconds = Histogram(
            "battery_restart_duration_seconds",
            "From signalling battery to it answering.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.host_calls = Counter(
            "host_calls_total",
            "HostAdmin calls made to battery, by RPC and result.",
            ["rpc", "result"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.refused = Counter(
            "refused_reports_total",
            "Node reports refused for an invalid flintlockd address.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.host_api = Gauge(
            "battery_host_api",
            "1 while battery answers AddHost/RemoveHost (no restarts).",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.host_checks = Counter(
            "host_list_checks_total",
            "Reads of battery's Host list (ListHosts) against the Hosts the registry added, by "
            "trigger: start, reconnect (battery's connection made again) or periodic (IN-105).",
            ["trigger"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.drift_repairs = Counter(
            "drift_repairs_total",
            "Hosts battery had lost that were added again (action=add), and Hosts the registry "
            "had removed that battery held again and were removed again (action=remove).",
            ["action"],
            namespace=NAMESPACE,
            registry=registry,
        )
