"""A certificate asked of the cluster's signer: one CertificateSigningRequest, read until the
signer answered (EA-067), and what the request must be (`Want`).

A read and not a watch: the agent may only create and get CSRs, and a watch would need
`list`/`watch` on every CSR of the cluster, which RBAC cannot narrow to one generated name.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric import ec

from batteryop.api.backoff import Backoff
from batteryop.kube.client import KubeClient
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS
from batteryop.tls import make_csr

log = logging.getLogger(__name__)

ANSWER_POLL_MIN: Final = 0.05
ANSWER_POLL_MAX: Final = 2.0
"""Reads of a CSR until its signer answered back off from 50 ms to 2 s."""


class CertificateError(Exception):
    """What a signer returned cannot be used, or a request was refused; `reason` says why."""

    def __init__(self, kind: str, reason: str, detail: str) -> None:
        super().__init__(f"{kind} certificate: {reason}: {detail}")
        self.kind = kind
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Want:
    """What one certificate must be: its signer, usages, and the names it carries."""

    kind: str
    signer: str
    usages: tuple[str, ...]
    uri: str
    ip: str | None
    ca_key: str
    """Key of the CA certificate in the bundle ConfigMap that must have signed it."""

    def request(self, key: ec.EllipticCurvePrivateKey, node: str) -> bytes:
        hosts = [self.uri] if self.ip is None else [self.ip, self.uri]
        return make_csr(key, node, hosts=hosts)


class CSRRequester:
    """Asks the cluster's signer for one certificate and reads the answer (EA-067)."""

    def __init__(
        self,
        kube: KubeClient,
        node: str,
        *,
        duration: timedelta | None = None,
        answer_timeout: float = 60.0,
    ) -> None:
        self._kube = kube
        self._node = node
        self._duration = duration
        self._answer_timeout = answer_timeout

    async def request(self, want: Want, key: ec.EllipticCurvePrivateKey) -> bytes:
        """The certificate chain the signer issued for `key`; CertificateError when the request
        was denied, failed, or found no answer in time."""
        spec: dict[str, Any] = {
            "request": base64.b64encode(want.request(key, self._node)).decode(),
            "signerName": want.signer,
            "usages": list(want.usages),
        }
        if self._duration is not None:
            spec["expirationSeconds"] = int(self._duration.total_seconds())
        body = {
            "apiVersion": CERTIFICATE_SIGNING_REQUESTS.api_version,
            "kind": "CertificateSigningRequest",
            "metadata": {"generateName": f"exec-agent-{self._node}-"},
            "spec": spec,
        }
        created = await self._kube.create(CERTIFICATE_SIGNING_REQUESTS, body)
        name = str(created["metadata"]["name"])
        log.info("Certificate requested", extra={"csr": name, "signer": want.signer})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._answer_timeout
        pause = Backoff(ANSWER_POLL_MIN, ANSWER_POLL_MAX)
        obj = created
        while True:
            status = obj.get("status") or {}
            for condition in status.get("conditions") or []:
                if condition.get("type") in ("Denied", "Failed"):
                    raise CertificateError(
                        want.kind,
                        f"{condition.get('type')}/{condition.get('reason') or ''}",
                        f"{name}: {condition.get('message') or 'no message'}",
                    )
            if status.get("certificate"):
                return base64.b64decode(status["certificate"])
            if loop.time() >= deadline:
                raise CertificateError(
                    want.kind, "NoAnswer", f"{name}: not signed within {self._answer_timeout}s"
                )
            await asyncio.sleep(pause.next())
            obj = await self._kube.get(CERTIFICATE_SIGNING_REQUESTS, name)
