"""Durations, instants and windows: what a reservation's time means."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import (
    MAX_DURATION_TEXT,
    START_TOLERANCE,
    Window,
    parse_duration,
    parse_instant,
    window_for,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("30m", timedelta(minutes=30), id="minutes"),
        pytest.param("4h", timedelta(hours=4), id="hours"),
        pytest.param("2d", timedelta(days=2), id="days"),
        pytest.param("90s", timedelta(seconds=90), id="seconds past a minute"),
        pytest.param("1w", timedelta(weeks=1), id="a week"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="hours and minutes"),
        pytest.param(
            "1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4), id="every short unit at once"
        ),
        pytest.param(" 4h ", timedelta(hours=4), id="spaces around the text"),
        pytest.param("PT4H", timedelta(hours=4), id="ISO 8601 hours"),
        pytest.param("P1DT2H", timedelta(days=1, hours=2), id="ISO 8601 days and hours"),
        pytest.param("P2D", timedelta(days=2), id="ISO 8601 days"),
        pytest.param("P1W", timedelta(weeks=1), id="ISO 8601 weeks"),
        pytest.param("PT30M", timedelta(minutes=30), id="ISO 8601 minutes"),
        pytest.param("PT1.5S", timedelta(seconds=1.5), id="ISO 8601 fractional seconds"),
        pytest.param("pt4h", timedelta(hours=4), id="ISO 8601 in lower case"),
    ],
)
def test_parse_duration_accepts_short_and_iso_forms(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty text"),
        pytest.param("0m", id="zero minutes"),
        pytest.param("0h0m", id="zero in two units"),
        pytest.param("PT0S", id="zero in ISO 8601"),
        pytest.param("-4h", id="a negative duration"),
        pytest.param("4", id="a number without a unit"),
        pytest.param("h", id="a unit without a number"),
        pytest.param("4x", id="a unit that does not exist"),
        pytest.param("4 h", id="a space between number and unit"),
        pytest.param("30m1h", id="units out of order"),
        pytest.param("1h1h", id="one unit twice"),
        pytest.param("P", id="ISO 8601 with nothing"),
        pytest.param("PT", id="ISO 8601 time part with nothing"),
        pytest.param("P1DT", id="ISO 8601 T with nothing after it"),
        pytest.param("abc", id="words"),
        pytest.param("P1M", id="ISO 8601 months, whose length varies"),
    ],
)
def test_parse_duration_refuses_zero_negative_and_garbage_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_duration(text)
    assert err.value.message.startswith("duration")
    assert err.value.details["field"] == "duration"


def test_parse_duration_explains_iso_months() -> None:
    with pytest.raises(InvalidInput, match="no fixed length"):
        parse_duration("P1Y")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(4, id="an integer"),
        pytest.param(4.0, id="a float"),
        pytest.param(["4h"], id="a list"),
    ],
)
def test_parse_duration_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidInput, match="duration"):
        parse_duration(value)


def test_parse_duration_refuses_overflow() -> None:
    with pytest.raises(InvalidInput, match="too large to be a duration"):
        parse_duration("99999999999999w")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9" * 5000 + "s", id="5000 digits of seconds"),
        pytest.param("P" + "9" * 5000 + "D", id="5000 digits of ISO 8601 days"),
        pytest.param("PT" + "9" * 5000 + ".5S", id="5000 digits of ISO 8601 seconds with a fraction"),
    ],
)
def test_500_on_long_digit_runs_in_duration(text: str) -> None:
    """Python refuses to read more than 4,300 digits as an integer: the text is refused before that."""
    with pytest.raises(InvalidInput) as err:
        parse_duration(text)
    assert err.value.message.startswith(f"duration is {len(text)} characters long; a duration is at most 64")
    assert err.value.details == {"field": "duration", "maxLength": MAX_DURATION_TEXT}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9" * 63 + "s", id="63 digits of seconds"),
        pytest.param("P" + "9" * 62 + "D", id="62 digits of ISO 8601 days"),
        pytest.param("PT" + "9" * 61 + "S", id="61 digits of ISO 8601 seconds"),
    ],
)
def test_500_on_long_digit_runs_in_duration_numbers_too_large_say_so(text: str) -> None:
    assert len(text) <= MAX_DURATION_TEXT
    with pytest.raises(InvalidInput, match="too large to be a duration: a window must end by the year 9999"):
        parse_duration(text)


def test_duration_text_at_the_limit_is_read() -> None:
    assert parse_duration(" " * (MAX_DURATION_TEXT - 2) + "4h") == timedelta(hours=4)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 500), st.integers(0, 500))
def test_short_and_iso_forms_agree(w: int, d: int, h: int, m: int, s: int) -> None:
    total = timedelta(weeks=w, days=d, hours=h, minutes=m, seconds=s)
    parts = [(w, "w"), (d, "d"), (h, "h"), (m, "m"), (s, "s")]
    short = "".join(f"{n}{u}" for n, u in parts if n)
    iso = f"P{w}W{d}DT{h}H{m}M{s}S"
    if total > timedelta(0):
        assert parse_duration(short) == total
        assert parse_duration(iso) == total
    else:
        with pytest.raises(InvalidInput):
            parse_duration(iso)


def test_parse_instant_reads_iso_with_offset_into_utc() -> None:
    assert parse_instant("2025-03-01T12:00:00Z") == NOW
    assert parse_instant("2025-03-01T14:00:00+02:00") == NOW
    assert parse_instant("2025-03-01T14:00:00+02:00").tzinfo == UTC


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("2025-03-01T12:00:00", id="a time without an offset"),
        pytest.param("yesterday", id="a word"),
        pytest.param("", id="empty text"),
        pytest.param(5, id="a number"),
    ],
)
def test_parse_instant_refuses_naive_and_garbage(text: object) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_instant(text)
    assert err.value.details["field"] == "start"


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_500_on_a_start_whose_offset_pushes_it_past_year_1_or_9999(text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_instant(text)
    assert err.value.message == f"start {text} is outside the years 1 to 9999 once converted to UTC"
    assert err.value.details["field"] == "start"
    # The HTTP route hands the service a datetime it parsed itself: the same refusal.
    with pytest.raises(InvalidInput, match="outside the years 1 to 9999") as err:
        window_for(datetime.fromisoformat(text), "1h", NOW)
    assert err.value.details["field"] == "start"


def test_window_requires_aware_instants_and_positive_length() -> None:
    with pytest.raises(InvalidInput, match="timezone"):
        Window(datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(InvalidInput, match="after start"):
        Window(NOW, NOW)
    with pytest.raises(InvalidInput, match="after start"):
        Window(NOW, NOW - timedelta(seconds=1))
    w = Window(NOW.astimezone(timezone(timedelta(hours=5))), None)
    assert w.start.tzinfo == UTC
    assert w.open_ended and w.duration is None
    assert Window(NOW, NOW + timedelta(hours=1)).duration == timedelta(hours=1)


def test_windows_are_half_open() -> None:
    a = Window(NOW, NOW + timedelta(hours=1))
    b = Window(NOW + timedelta(hours=1), NOW + timedelta(hours=2))
    assert not a.overlaps(b) and not b.overlaps(a)
    assert a.contains(NOW) and not a.contains(NOW + timedelta(hours=1))
    c = Window(NOW + timedelta(minutes=59), None)
    assert a.overlaps(c) and c.overlaps(a)
    assert Window(NOW, None).overlaps(Window(NOW + timedelta(days=900), None))
    assert not a.overlaps(Window(NOW + timedelta(hours=3), None))


@given(st.integers(0, 100), st.integers(1, 50), st.integers(0, 100), st.integers(1, 50))
def test_overlap_is_symmetric_and_matches_a_shared_minute(s1: int, l1: int, s2: int, l2: int) -> None:
    a = Window(NOW + timedelta(minutes=s1), NOW + timedelta(minutes=s1 + l1))
    b = Window(NOW + timedelta(minutes=s2), NOW + timedelta(minutes=s2 + l2))
    shared = set(range(s1, s1 + l1)) & set(range(s2, s2 + l2))
    assert a.overlaps(b) == b.overlaps(a) == bool(shared)


def test_window_for_defaults_to_now_and_adds_the_duration() -> None:
    w = window_for(None, "4h", NOW)
    assert w == Window(NOW, NOW + timedelta(hours=4))
    assert window_for(None, timedelta(minutes=5), NOW).end == NOW + timedelta(minutes=5)
    assert window_for(None, None, NOW) == Window(NOW, None)


def test_window_for_takes_a_future_start() -> None:
    start = NOW + timedelta(days=1)
    assert window_for(start, "1h", NOW) == Window(start, start + timedelta(hours=1))


def test_window_for_moves_a_slightly_past_start_to_now() -> None:
    w = window_for(NOW - START_TOLERANCE, "1h", NOW)
    assert w.start == NOW and w.end == NOW + timedelta(hours=1)


def test_window_for_refuses_a_start_in_the_past() -> None:
    with pytest.raises(InvalidInput, match="in the past") as err:
        window_for(NOW - START_TOLERANCE - timedelta(seconds=1), "1h", NOW)
    assert err.value.details["field"] == "start"


def test_window_for_refuses_a_naive_start() -> None:
    with pytest.raises(InvalidInput, match="timezone") as err:
        window_for(datetime(2030, 1, 1), "1h", NOW)  # noqa: DTZ001
    assert err.value.details["field"] == "start"


def test_window_for_refuses_a_bad_duration() -> None:
    with pytest.raises(InvalidInput, match="duration"):
        window_for(None, "0h", NOW)
    with pytest.raises(InvalidInput, match="duration"):
        window_for(None, timedelta(0), NOW)
