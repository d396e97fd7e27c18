"""The CSR approver's Prometheus metrics, on a registry the entry point (or a test) creates.

Labels are bounded: the signer (three values, anything else is never counted), the outcome
(approved, denied, failed, signed) and, on failures, the check's name. Request names, Node names
and addresses are never labels: the address pins are counted, and a released pin is named in
the log line "Released address pin".
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from batteryop.obs.exported.csr_approver import (
    ADDRESS_PINS,
    ADDRESS_PINS_RELEASED,
    CA_LOADED,
    REQUESTS,
    REVIEW_SECONDS,
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
