"""The review's two writes to a request: a condition (`Approved` and `Denied` through
`/approval`, `Failed` through `/status`) and the certificate (through `/status`). Each replaces
the request with the resourceVersion it was decided on, so a write conflicts rather than land
on a newer copy; its answer becomes the scope's newest copy.
"""

from __future__ import annotations

import base64
import copy
import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from batteryop.api.conditions import CSRCondition, CSRReason
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS


def _rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def write_condition(
    scope: ReviewScope, type: CSRCondition, reason: CSRReason, message: str
) -> None:
    """Append a True condition to the request."""
    now = _rfc3339(scope.deps.clock.now())
    body = copy.deepcopy(scope.obj)
    status = body.setdefault("status", {})
    status.setdefault("conditions", [])
    status["conditions"].append(
        {
            "type": str(type),
            "status": "True",
            "reason": str(reason),
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
    )
    sub = "status" if type == CSRCondition.FAILED else "approval"
    answer = await scope.deps.kube.replace(
        CERTIFICATE_SIGNING_REQUESTS, scope.name, body, subresource=sub
    )
    scope.deps.remember(answer)
    scope.obj = answer


async def write_certificate(scope: ReviewScope, cert: x509.Certificate) -> None:
    """Write the signed certificate into the request's status."""
    body = copy.deepcopy(scope.obj)
    body.setdefault("status", {})["certificate"] = base64.b64encode(
        cert.public_bytes(serialization.Encoding.PEM)
    ).decode()
    answer = await scope.deps.kube.replace(
        CERTIFICATE_SIGNING_REQUESTS, scope.name, body, subresource="status"
    )
    scope.deps.remember(answer)
    scope.obj = answer
