"""The CSR approver's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the signer (three values, anything else is never counted), the outcome
(approved, denied, failed, signed) and, on failures, the check's name. Request names, Node names
and addresses are never labels: the address pins are counted, and a released pin is named in
the log line "Released address pin".
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

NAMESPACE = "battery_csr_approver"


class ApproverMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = Counter(
            "requests_total",
            "Requests decided or signed, by signer, outcome and (for denied and failed) check.",
            ["signer", "outcome", "check"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.review_seconds = Histogram(
            "review_duration_seconds",
            "Time to review one request and write the result.",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.ca_loaded = Gauge(
            "ca_loaded",
            "1 while the CA from this Secret is loaded and usable.",
            ["secret"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.address_pins = Gauge(
            "address_pins",
            "Address pins held in the pins ConfigMap, as last read or written (CT-016).",
            namespace=NAMESPACE,
            registry=registry,
        )
        self.address_pins_released = Counter(
            "address_pins_released",
            "Address pins released: their Node gone and their certificates expired (CT-100).",
            namespace=NAMESPACE,
            registry=registry,
        )

    def outcome(self, signer: str, outcome: str, check: str = "") -> None:
        self.outcomes.labels(signer, outcome, check).inc()
