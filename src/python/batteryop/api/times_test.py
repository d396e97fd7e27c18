from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batteryop.api.times import (
    format_duration,
    format_micro_time,
    format_rfc3339_nano,
    format_time,
    parse_duration,
    parse_time,
    truncate_to_seconds,
)

AWARE = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2999, 12, 31), timezones=st.just(UTC)
)


def test_time_is_written_in_utc_with_whole_seconds() -> None:
    t = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(t) == "2026-03-04T03:06:07Z"
    assert format_micro_time(t) == "2026-03-04T03:06:07.891011Z"


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        format_time(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.5Z", datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.123456789Z", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2026-01-02T05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ],
)
def test_parse_time_reads_every_kubernetes_form(text: str, expected: datetime) -> None:
    got = parse_time(text)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize("text", ["", "2026-01-02", "2026-01-02T03:04:05", "yesterday"])
def test_parse_time_refuses_what_is_not_rfc3339(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time(text)


@given(AWARE)
def test_micro_time_round_trips(t: datetime) -> None:
    assert parse_time(format_micro_time(t)) == t


def test_rfc3339_nano_trims_the_fraction_as_go_does() -> None:
    t = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=timezone(timedelta(hours=2)))
    assert format_rfc3339_nano(t) == "2026-03-04T03:06:07.891Z"
    assert format_rfc3339_nano(t.replace(microsecond=0)) == "2026-03-04T03:06:07Z"
    assert format_rfc3339_nano(t.replace(microsecond=5)) == "2026-03-04T03:06:07.000005Z"


@given(AWARE)
def test_rfc3339_nano_round_trips(t: datetime) -> None:
    assert parse_time(format_rfc3339_nano(t)) == t


@given(AWARE)
def test_time_round_trips_to_the_second(t: datetime) -> None:
    assert parse_time(format_time(t)) == truncate_to_seconds(t)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(microseconds=1), "1µs"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=10), "10s"),
        (timedelta(seconds=1.25), "1.25s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(hours=1), "1h0m0s"),
        (timedelta(hours=26, seconds=1), "26h0m1s"),
        (timedelta(seconds=-5), "-5s"),
    ],
)
def test_format_duration_writes_what_go_writes(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("30s", timedelta(seconds=30)),
        ("1.5h", timedelta(minutes=90)),
        ("1h30m", timedelta(minutes=90)),
        ("2m3.5s", timedelta(seconds=123.5)),
        ("100us", timedelta(microseconds=100)),
        ("100μs", timedelta(microseconds=100)),
        ("1500ns", timedelta(microseconds=1)),
        (".5s", timedelta(milliseconds=500)),
        ("+5s", timedelta(seconds=5)),
        ("0", timedelta(0)),
    ],
)
def test_parse_duration_reads_go_durations(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["", "10", "10x", "s", "1d", "1h 30m", "--1s"])
def test_parse_duration_refuses_what_go_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@given(st.timedeltas(min_value=timedelta(days=-400), max_value=timedelta(days=400)))
def test_durations_round_trip(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value
