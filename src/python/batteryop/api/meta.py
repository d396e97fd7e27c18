"""The part of `metadata` our code reads and writes, as a frozen dataclass."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from batteryop.api import names
from batteryop.api._fields import Fields
from batteryop.api.errors import MalformedObjectError
from batteryop.api.times import format_time


@dataclass(frozen=True)
class ObjectMeta:
    """Identity, generation, deletion and finalizers of an object; empty strings when unset.

    `generate_name` is only for new objects; the server sets `uid`, `resource_version`,
    `generation` and the timestamps.
    """

    name: str = ""
    namespace: str = ""
    generate_name: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    finalizers: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def deleting(self) -> bool:
        """Whether deletion has been requested (the object waits on its finalizers)."""
        return self.deletion_timestamp is not None

    def has_finalizer(self, finalizer: str) -> bool:
        return finalizer in self.finalizers

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ObjectMeta:
        f = Fields(data or {}, "metadata")
        return cls(
            name=f.opt_string("name") or "",
            namespace=f.opt_string("namespace") or "",
            generate_name=f.opt_string("generateName") or "",
            uid=f.opt_string("uid") or "",
            resource_version=f.opt_string("resourceVersion") or "",
            generation=f.opt_integer("generation") or 0,
            creation_timestamp=f.opt_time("creationTimestamp"),
            deletion_timestamp=f.opt_time("deletionTimestamp"),
            finalizers=f.str_list("finalizers"),
            labels=f.str_map("labels"),
            annotations=f.str_map("annotations"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The set fields only, so the result is also a valid body for a create."""
        out: dict[str, Any] = {}
        for key, value in (
            ("name", self.name),
            ("namespace", self.namespace),
            ("generateName", self.generate_name),
            ("uid", self.uid),
            ("resourceVersion", self.resource_version),
        ):
            if value:
                out[key] = value
        if self.generation:
            out["generation"] = self.generation
        if self.creation_timestamp is not None:
            out["creationTimestamp"] = format_time(self.creation_timestamp)
        if self.deletion_timestamp is not None:
            out["deletionTimestamp"] = format_time(self.deletion_timestamp)
        if self.finalizers:
            out["finalizers"] = list(self.finalizers)
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


class Named:
    """`name` and `namespace` of an object with `metadata` (Pool, MicroVMClaim)."""

    metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace


S = TypeVar("S")
T = TypeVar("T")


def read_object(
    body: Mapping[str, Any],
    kind: str,
    spec: Callable[[Any], S],
    status: Callable[[Any], T],
) -> tuple[ObjectMeta, S, T]:
    """Metadata, spec and status of a body; a malformed field names the object it is in."""
    metadata = ObjectMeta.from_dict(body.get("metadata"))
    try:
        return metadata, spec(body.get("spec")), status(body.get("status"))
    except MalformedObjectError as e:
        raise e.about(kind, metadata.name) from None


def write_object(
    kind: str, metadata: ObjectMeta, spec: dict[str, Any], status: dict[str, Any] | None
) -> dict[str, Any]:
    """The whole body of one of our kinds; `status` only when there is one."""
    body: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "metadata": metadata.to_dict(),
        "spec": spec,
    }
    if status is not None:
        body["status"] = status
    return body
