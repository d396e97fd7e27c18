"""Step `sign`: an Approved request that passed is signed with its signer's CA (CT-101,
CT-103). A CA not loaded yet ends the review (loading it queues every open request again).

CT-016: the address pin, and its expiry (the newest certificate's), are stored before the
certificate, so a pin never expires before a certificate signed under it (CT-100); then the
certificate is written through `/status`.
"""

from __future__ import annotations

import logging

from batteryop.csr_approver.checks import Approval
from batteryop.csr_approver.pins import pin_certificate
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.csr_approver.review.writes import write_certificate
from batteryop.csr_approver.signing import ca_secret_for, issue

log = logging.getLogger("batteryop.csr_approver.controller")


async def sign(scope: ReviewScope) -> None:
    approval = scope.verdict
    assert isinstance(approval, Approval), "sign runs after a passing check"
    deps, config, request = scope.deps, scope.deps.config, scope.request
    secret = ca_secret_for(
        request.signer, config.serving_ca_secret, config.exec_agent_serving_ca_secret
    )  # CT-101, CT-103
    ca = deps.ca(secret)
    if ca is None:
        log.info("Waiting for the CA to sign", extra={"csr": scope.name, "secret": secret})
        scope.stop()
        return
    cert = issue(
        ca,
        approval,
        request.signer,
        now=deps.clock.now(),
        max_duration=config.certificate_max_duration,
        requested_seconds=request.expiration_seconds,
    )
    if approval.ip is not None:
        # CT-016: the pin first, then the certificate.
        scope.pins = await pin_certificate(
            deps.kube,
            config.namespace,
            config.address_pins_config_map,
            scope.pins,
            approval.node,
            str(approval.ip),
            cert.not_valid_after_utc,
        )
        scope.count_pins()
        if approval.pin:
            log.info("Pinned address", extra={"node": approval.node, "address": str(approval.ip)})
    await write_certificate(scope, cert)
    scope.count("signed")
    log.info(
        "Signed CertificateSigningRequest",
        extra={
            **scope.extra,
            "node": approval.node,
            "not_after": cert.not_valid_after_utc.isoformat(),
        },
    )
