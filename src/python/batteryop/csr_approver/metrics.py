"""The CSR approver's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the signer (three values, anything else is never counted), the outcome
(approved, denied, failed, signed) and, on failures, the check's name. Request names, Node names
and addresses are never labels: the address pins are counted, and a released pin is named in
the log line "Released address pin".
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from batteryop.obs.catalog import Kind, MetricDef

NAMESPACE = "battery_csr_approver"


REQUESTS = MetricDef(
    NAMESPACE,
    "requests_total",
    Kind.COUNTER,
    "Requests decided or signed, by signer, outcome and (for denied and failed) check.",
    ("signer", "outcome", "check"),
)
REVIEW_SECONDS = MetricDef(
    NAMESPACE,
    "review_duration_seconds",
    Kind.HISTOGRAM,
    "Time to review one request and write the result.",
)
CA_LOADED = MetricDef(
    NAMESPACE,
    "ca_loaded",
    Kind.GAUGE,
    "1 while the CA from this Secret is loaded and usable.",
    ("secret",),
)
ADDRESS_PINS = MetricDef(
    NAMESPACE,
    "address_pins",
    Kind.GAUGE,
    "Address pins held in the pins ConfigMap, as last read or written (CT-016).",
)
ADDRESS_PINS_RELEASED = MetricDef(
    NAMESPACE,
    "address_pins_released",
    Kind.COUNTER,
    "Address pins released: their Node gone and their certificates expired (CT-100).",
)


class ApproverMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = REQUESTS.counter(registry)
        self.review_seconds = REVIEW_SECONDS.histogram(registry)
        self.ca_loaded = CA_LOADED.gauge(registry)
        self.address_pins = ADDRESS_PINS.gauge(registry)
        self.address_pins_released = ADDRESS_PINS_RELEASED.counter(registry)

    def outcome(self, signer: str, outcome: str, check: str = "") -> None:
        self.outcomes.labels(signer, outcome, check).inc()
