"""Log output for entry points: JSON lines (or plain text) on stderr, with secrets redacted.

Only entry points call `configure_logging`; library code only logs, passing context as
``extra={...}`` (object name, namespace, rpc, code, ...). Each JSON line holds ``time``
(RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``message``, every extra key, and
``exception`` (the formatted traceback, as a string) when there is one.

Redaction: an extra whose key has a word ``token``, ``password``, ``passwd``,
``authorization``, ``key``, ``apikey``, ``cookie`` or ``credentials`` (``bearer_token``,
``privateKey``, ``api-key``; singular or plural) is written as ``[REDACTED]``, at any
depth of nested mappings; ``Bearer <value>`` in a message or traceback is cut to
``Bearer [REDACTED]``.

kopf's per-object logger extras are mapped: ``k8s_ref`` becomes ``object``; its internal
``settings`` and ``k8s_skip`` are dropped.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO

REDACTED = "[REDACTED]"

_SENSITIVE_WORDS = frozenset(
    {"token", "password", "passwd", "authorization", "key", "apikey", "cookie", "credential"}
)
_CORE_FIELDS = ("time", "level", "logger", "message", "exception", "stack")
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
_DROPPED_EXTRAS = frozenset({"settings", "k8s_skip"})  # kopf's ObjectLogger internals
_RENAMED_EXTRAS = {"k8s_ref": "object"}
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s'\",;]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_PLAIN_VALUE = re.compile(r"[\w./:@+-]+")


def is_sensitive(key: str) -> bool:
    """Whether an extra named `key` may hold a secret (see the module docstring)."""
    words = _WORD_SPLIT.split(_CAMEL.sub(r"\1_\2", key).lower())
    return any(w in _SENSITIVE_WORDS or w.removesuffix("s") in _SENSITIVE_WORDS for w in words)


def redact(value: Any) -> Any:
    """`value` with every sensitive key of every nested mapping replaced by `REDACTED`."""
    if isinstance(value, Mapping):
        return {str(k): REDACTED if is_sensitive(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    return value


def redact_text(text: str) -> str:
    return _BEARER.sub(r"\1 " + REDACTED, text)


def record_extras(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` key/values of `record`, redacted, kopf's mapped (see module docstring)."""
    extras: dict[str, Any] = {}
    for key, value in vars(record).items():
        if key in _RECORD_ATTRS or key in _DROPPED_EXTRAS or key.startswith("_"):
            continue
        extras[_RENAMED_EXTRAS.get(key, key)] = value
    return {k: REDACTED if is_sensitive(k) else redact(v) for k, v in extras.items()}


def rfc3339(created: float) -> str:
    when = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json_default(value: object) -> object:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        for key, value in record_extras(record).items():
            doc[f"extra_{key}" if key in _CORE_FIELDS else key] = value
        if record.exc_info:
            doc["exception"] = redact_text(self.formatException(record.exc_info))
        elif record.exc_text:
            doc["exception"] = redact_text(record.exc_text)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=_json_default, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message> key=value ...``, traceback on following lines."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            rfc3339(record.created),
            record.levelname,
            f"{record.name}:",
            redact_text(record.getMessage()),
        ]
        parts += [f"{k}={_text_value(v)}" for k, v in record_extras(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + redact_text(self.formatException(record.exc_info))
        elif record.exc_text:
            line += "\n" + redact_text(record.exc_text)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _text_value(value: object) -> str:
    if isinstance(value, str) and _PLAIN_VALUE.fullmatch(value):
        return value
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def parse_level(level: str) -> int:
    """A logging level from its name (``debug``, ``INFO``, ``warn``...); `ValueError` if unknown."""
    try:
        return _LEVELS[level.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}; expected one of {', '.join(sorted(_LEVELS))}"
        ) from None


def configure_logging(
    level: str, fmt: Literal["json", "text"], *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (stderr) as `fmt`.

    For entry points only. Replaces the root logger's handlers (like ``basicConfig(force=True)``)
    and routes `warnings` into logging. Returns the installed handler.
    """
    numeric = parse_level(level)
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
    elif fmt == "text":
        formatter = TextFormatter()
    else:
        raise ValueError(f"unknown log format {fmt!r}; expected 'json' or 'text'")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)
    return handler
