"""`Request`: a CertificateSigningRequest object read once into the fields the approver uses.

Reading never fails: a field of the wrong shape reads as missing, and the checks then refuse the
request with a reason (a body the approver cannot read never crashes it). The PEM is decoded from
`spec.request` by the `request` check, not here, so that a bad encoding is a denial too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batteryop.api.conditions import CSRCondition


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _extra(value: object) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        return {}
    extra: dict[str, tuple[str, ...]] = {}
    for key, values in value.items():
        if isinstance(key, str) and isinstance(values, list):
            extra[key] = tuple(v for v in values if isinstance(v, str))
    return extra


@dataclass(frozen=True)
class Request:
    """The parts of a CSR the approver reads; `conditions` are the True condition types."""

    name: str
    uid: str
    resource_version: str
    signer: str
    username: str
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    usages: tuple[str, ...] = ()
    request_b64: str = ""
    expiration_seconds: int | None = None
    conditions: frozenset[str] = frozenset()
    issued: bool = False

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Request:
        meta, spec, status = (_map(obj.get(k)) for k in ("metadata", "spec", "status"))
        usages = tuple(u for u in _list(spec.get("usages")) if isinstance(u, str))
        seconds = spec.get("expirationSeconds")
        conditions = _list(status.get("conditions"))
        true_types = frozenset(
            _str(c.get("type"))
            for c in conditions
            if isinstance(c, Mapping) and c.get("status", "True") == "True"
        )
        return cls(
            name=_str(meta.get("name")),
            uid=_str(meta.get("uid")),
            resource_version=_str(meta.get("resourceVersion")),
            signer=_str(spec.get("signerName")),
            username=_str(spec.get("username")),
            extra=_extra(spec.get("extra")),
            usages=usages,
            request_b64=_str(spec.get("request")),
            expiration_seconds=seconds if isinstance(seconds, int) and seconds > 0 else None,
            conditions=true_types,
            issued=bool(status.get("certificate")),
        )

    @property
    def approved(self) -> bool:
        return CSRCondition.APPROVED in self.conditions

    @property
    def denied(self) -> bool:
        return CSRCondition.DENIED in self.conditions

    @property
    def failed(self) -> bool:
        return CSRCondition.FAILED in self.conditions
