"""The CSR approver's metrics, defined once; `csr_approver.metrics` makes them."""

from __future__ import annotations

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

DEFINED = (
    REQUESTS,
    REVIEW_SECONDS,
    CA_LOADED,
    ADDRESS_PINS,
    ADDRESS_PINS_RELEASED,
)
"""In the order the reference lists them."""
