"""Typed reads from a Kubernetes body, with the field's path in every error (private)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from batteryop.api._compat import StrEnum
from batteryop.api.errors import MalformedObjectError
from batteryop.api.times import parse_duration, parse_time

E = TypeVar("E", bound=StrEnum)


class Fields:
    """A view of one JSON object in a body; `path` is where it sits (`spec.template`)."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise MalformedObjectError(path or "<root>", f"expected an object, got {data!r}")
        self.data: Mapping[str, Any] = data
        self.path = path

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, required: bool) -> Any:
        value = self.data.get(key)
        if value is None and required:
            raise MalformedObjectError(self._at(key), "required value is missing")
        return value

    def _typed(self, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise MalformedObjectError(self._at(key), f"expected {what}, got {value!r}")
        return value

    def string(self, key: str) -> str:
        value: str = self._typed(key, self._get(key, True), str, "a string")
        return value

    def opt_string(self, key: str) -> str | None:
        value = self._get(key, False)
        return None if value is None else self._typed(key, value, str, "a string")

    def integer(self, key: str) -> int:
        value: int = self._typed(key, self._get(key, True), int, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        value = self._get(key, False)
        return None if value is None else self._typed(key, value, int, "an integer")

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self._get(key, False)
        return default if value is None else self._typed(key, value, bool, "a boolean")

    def choice(self, key: str, enum_type: type[E], default: E | None = None) -> E:
        """A string the CRD restricts to an enum; `default` when absent (the CRD's default)."""
        value = self.opt_string(key)
        if value is None:
            if default is None:
                raise MalformedObjectError(self._at(key), "required value is missing")
            return default
        try:
            return enum_type(value)
        except ValueError:
            allowed = ", ".join(str(m) for m in enum_type)
            raise MalformedObjectError(
                self._at(key), f"unsupported value {value!r}: expected one of {allowed}"
            ) from None

    def str_map(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        self._typed(key, value, Mapping, "an object")
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise MalformedObjectError(f"{self._at(key)}.{k}", f"expected a string, got {v!r}")
        return dict(value)

    def str_list(self, key: str) -> tuple[str, ...]:
        value = self._get(key, False)
        if value is None:
            return ()
        self._typed(key, value, list, "a list")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise MalformedObjectError(
                    f"{self._at(key)}[{i}]", f"expected a string, got {item!r}"
                )
        return tuple(value)

    def obj(self, key: str) -> Fields:
        return Fields(self._get(key, True), self._at(key))

    def opt_obj(self, key: str) -> Fields | None:
        value = self._get(key, False)
        return None if value is None else Fields(value, self._at(key))

    def obj_or_empty(self, key: str) -> Fields:
        """An object the CRD defaults to `{}`: absent reads as empty."""
        value = self._get(key, False)
        return Fields({} if value is None else value, self._at(key))

    def obj_list(self, key: str) -> list[Fields]:
        value = self._get(key, False)
        if value is None:
            return []
        self._typed(key, value, list, "a list")
        return [Fields(item, f"{self._at(key)}[{i}]") for i, item in enumerate(value)]

    def opt_time(self, key: str) -> datetime | None:
        value = self.opt_string(key)
        if value is None:
            return None
        try:
            return parse_time(value)
        except ValueError as e:
            raise MalformedObjectError(self._at(key), str(e)) from None

    def time(self, key: str) -> datetime:
        value = self.opt_time(key)
        if value is None:
            raise MalformedObjectError(self._at(key), "required value is missing")
        return value

    def duration(self, key: str, default: timedelta) -> timedelta:
        found = self.opt_duration(key)
        return default if found is None else found

    def opt_duration(self, key: str) -> timedelta | None:
        value = self.opt_string(key)
        if value is None:
            return None
        try:
            return parse_duration(value)
        except ValueError as e:
            raise MalformedObjectError(self._at(key), str(e)) from None
