import datetime
import io
import json
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from batteryop.obs.logging import (
    REDACTED,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    parse_level,
)

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _record(
    msg: str,
    *args: object,
    level: int = logging.INFO,
    extra: dict[str, Any] | None = None,
    exc: bool = False,
) -> logging.LogRecord:
    exc_info = sys.exc_info() if exc else None
    record = logging.getLogger("batteryop.test").makeRecord(
        "batteryop.test", level, __file__, 1, msg, args, exc_info, extra=extra
    )
    return record


def _json(record: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert isinstance(doc, dict)
    return doc


def test_a_json_line_has_time_level_logger_message_and_extras() -> None:
    record = _record(
        "claim %s bound",
        "c1",
        extra={"claim": "c1", "namespace": "team-a", "rpc": "ClaimVM", "attempt": 2},
    )
    doc = _json(record)
    assert RFC3339_UTC.fullmatch(doc["time"])
    when = datetime.datetime.fromisoformat(doc["time"])
    assert when.utcoffset() == datetime.timedelta(0)
    assert abs(when.timestamp() - record.created) < 0.001
    assert doc == {
        "time": doc["time"],
        "level": "info",
        "logger": "batteryop.test",
        "message": "claim c1 bound",
        "claim": "c1",
        "namespace": "team-a",
        "rpc": "ClaimVM",
        "attempt": 2,
    }


def test_exceptions_are_one_string_field() -> None:
    try:
        raise ValueError("bad pool spec")
    except ValueError:
        record = _record("reconcile failed", level=logging.ERROR, exc=True)
    doc = _json(record)
    assert doc["level"] == "error"
    assert isinstance(doc["exception"], str)
    assert doc["exception"].startswith("Traceback (most recent call last):")
    assert doc["exception"].endswith("ValueError: bad pool spec")


def test_secret_extras_are_redacted_at_any_depth() -> None:
    extra = {
        "token": "eyJhbGciOi.secret",
        "bearer_token": "t2",
        "password": "hunter2",
        "Authorization": "Bearer abc",
        "privateKey": "-----BEGIN",
        "api-key": "k",
        "request": {"headers": {"authorization": "Bearer xyz", "accept": "json"}, "id": 7},
        "items": [{"key": "v"}, "plain"],
        "keyspace": "kept",
        "pool": "kept",
    }
    doc = _json(_record("calling", extra=extra))
    for field in ("token", "bearer_token", "password", "Authorization", "privateKey", "api-key"):
        assert doc[field] == REDACTED, field
    assert doc["request"] == {"headers": {"authorization": REDACTED, "accept": "json"}, "id": 7}
    assert doc["items"] == [{"key": REDACTED}, "plain"]
    assert doc["keyspace"] == "kept"
    assert doc["pool"] == "kept"
    assert "hunter2" not in JsonFormatter().format(_record("calling", extra=extra))


def test_bearer_values_in_messages_and_tracebacks_are_redacted() -> None:
    try:
        raise PermissionError("sent Authorization: Bearer s3cr3t-token")
    except PermissionError:
        record = _record("header was %s", "Bearer abc.def", exc=True)
    line = JsonFormatter().format(record)
    assert "abc.def" not in line
    assert "s3cr3t" not in line
    doc = json.loads(line)
    assert doc["message"] == f"header was Bearer {REDACTED}"
    assert f"Bearer {REDACTED}" in doc["exception"]


def test_extras_never_replace_the_core_fields_and_odd_values_serialise() -> None:
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    doc = _json(
        _record(
            "m",
            extra={
                "time": "x",
                "level": "y",
                "when": when,
                "ttl": datetime.timedelta(seconds=90),
                "obj": object(),
            },
        )
    )
    assert doc["extra_time"] == "x"
    assert doc["extra_level"] == "y"
    assert doc["level"] == "info"
    assert doc["when"] == "2024-01-02T03:04:05+00:00"
    assert doc["ttl"] == 90.0
    assert doc["obj"].startswith("<object object")


def test_kopf_object_logger_extras_are_mapped() -> None:
    ref = {"kind": "MicroVMClaim", "name": "c1", "namespace": "team-a"}
    doc = _json(_record("m", extra={"settings": object(), "k8s_skip": False, "k8s_ref": ref}))
    assert "settings" not in doc
    assert "k8s_skip" not in doc
    assert doc["object"] == ref


def test_text_format_has_extras_as_key_values_and_redacts() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _record(
            "claim bound", extra={"claim": "c1", "reason": "two words", "token": "t"}, exc=True
        )
    first, *rest = TextFormatter().format(record).splitlines()
    stamp, level, logger, *message = first.split(" ")
    assert RFC3339_UTC.fullmatch(stamp)
    assert (level, logger) == ("INFO", "batteryop.test:")
    assert " ".join(message) == f'claim bound claim=c1 reason="two words" token="{REDACTED}"'
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: boom"


@pytest.fixture
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.mark.usefixtures("_restore_root_logger")
def test_configure_logging_sends_records_at_level_to_the_stream_as_json() -> None:
    out = io.StringIO()
    configure_logging("WARNING", "json", stream=out)
    configure_logging("info", "json", stream=out)  # a second call replaces, never duplicates
    log = logging.getLogger("batteryop.obs.example")
    log.debug("hidden")
    log.info("shown", extra={"pool": "p1"})
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 2
    assert (lines[0]["logger"], lines[0]["message"], lines[0]["pool"]) == (
        "batteryop.obs.example",
        "shown",
        "p1",
    )
    assert lines[1]["logger"] == "py.warnings"
    assert "deprecated thing" in lines[1]["message"]


@pytest.mark.usefixtures("_restore_root_logger")
def test_configure_logging_text() -> None:
    out = io.StringIO()
    configure_logging("debug", "text", stream=out)
    logging.getLogger("x").debug("hello", extra={"rpc": "Heartbeat"})
    assert out.getvalue().rstrip("\n").endswith("DEBUG x: hello rpc=Heartbeat")


def test_unknown_levels_and_formats_are_refused() -> None:
    assert parse_level("Warn") == logging.WARNING
    with pytest.raises(ValueError, match="'verbose'"):
        parse_level("verbose")
    with pytest.raises(ValueError, match="'yaml'"):
        configure_logging("info", "yaml")  # type: ignore[arg-type]
