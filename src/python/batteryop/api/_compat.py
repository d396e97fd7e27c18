"""What the client wheel needs from Python 3.11, on 3.10 too (CC: the wheel supports 3.10..3.13).

The library packages the client ships (`batteryop.api`, `batteryop.kube`) use `StrEnum` from
here rather than from `enum`: on 3.11 and newer it *is* `enum.StrEnum`; on 3.10 it is a `str`
Enum whose `str()` and format are its value, which is all the project relies on. (`datetime.UTC`
is `UTC` from here, the same object as `datetime.timezone.utc`.)
"""

from __future__ import annotations

import datetime
import enum
import sys

UTC = datetime.timezone.utc  # noqa: UP017 (datetime.UTC is 3.11)
"""`datetime.UTC` of 3.11, the same object."""

if sys.version_info >= (3, 11):  # noqa: UP036 (the client wheel also runs on 3.10)
    from enum import StrEnum
else:  # pragma: no cover - exercised by the wheel test on CPython 3.10

    class StrEnum(str, enum.Enum):
        """`enum.StrEnum` of 3.11: members are strings; `str()` and `format()` give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


__all__ = ["UTC", "StrEnum"]
