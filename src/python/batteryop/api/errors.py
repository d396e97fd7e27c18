"""Errors raised while reading Pool and MicroVMClaim bodies."""

from __future__ import annotations


class MalformedObjectError(ValueError):
    """A body does not have the shape the CRD guarantees (e.g. built by hand, or pruned).

    `kind` and `name` identify the object where known; `path` is the field, in the dotted form
    the API server uses in its messages (`spec.template.vcpu`).
    """

    def __init__(self, path: str, detail: str, *, kind: str = "", name: str = "") -> None:
        self.path = path
        self.detail = detail
        self.kind = kind
        self.name = name
        where = f"{kind} {name!r}: " if kind else ""
        super().__init__(f"{where}{path}: {detail}")

    def about(self, kind: str, name: str) -> MalformedObjectError:
        """The same error, naming the object it was found in."""
        return MalformedObjectError(self.path, self.detail, kind=kind, name=name)
