"""Step `read_pins`: the address pins, fresh from their ConfigMap, for a serving signer.

CT-100: before a Node without a pin is reviewed (it may be about to pin, or ask for an address
a gone Node held), the pins of gone Nodes whose certificates expired are released (`pins` says
why then, and not on a watch of Nodes).
"""

from __future__ import annotations

import logging

from batteryop.csr_approver.pins import read_pins, release_gone
from batteryop.csr_approver.review.scope import ReviewScope

log = logging.getLogger("batteryop.csr_approver.controller")


async def read_addresses_pinned(scope: ReviewScope) -> None:
    if not scope.serving:
        return
    deps = scope.deps
    config = deps.config
    scope.pins = await read_pins(deps.kube, config.namespace, config.address_pins_config_map)
    if scope.node is not None and scope.node.name not in scope.pins.entries:
        scope.pins, released = await release_gone(  # CT-100
            deps.kube,
            config.namespace,
            config.address_pins_config_map,
            scope.pins,
            now=deps.clock.now(),
            unknown_expiry=config.certificate_max_duration,
        )
        for node, pin in released.items():
            log.info(
                "Released address pin",
                extra={
                    "node": node,
                    "address": pin.address,
                    "not_after": pin.not_after.isoformat() if pin.not_after else None,
                },
            )
            if deps.metrics:
                deps.metrics.address_pins_released.inc()
    scope.count_pins()
