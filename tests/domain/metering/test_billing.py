"""Billing rules without a database: periods, prices, and a bill's lines and total."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.billing import (
    Price,
    amount,
    check_currency,
    check_per_hour,
    month_of,
    period,
    rate,
)
from tests.builders import T0


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_the_default_period_is_the_calendar_month_in_utc() -> None:
    assert period(None, None, T0) == Window(utc(2026, 12, 1), utc(2027, 1, 1))
    assert month_of(utc(2027, 2, 28, 23, 59)) == Window(utc(2027, 2, 1), utc(2027, 3, 1))


def test_a_period_takes_dates_and_timestamps_with_their_offset() -> None:
    assert period("2030-01-01", "2030-02-01", T0) == Window(utc(2030, 1, 1), utc(2030, 2, 1))
    assert period("2030-01-01T10:00:00+02:00", "2030-01-01T09:00:00Z", T0) == Window(
        utc(2030, 1, 1, 8), utc(2030, 1, 1, 9)
    )


@pytest.mark.parametrize(
    ("since", "until", "message"),
    [
        pytest.param(
            "2030-01-02", "2030-01-01", "from must be before to: from 2030-01-02T00:00:00Z", id="inverted"
        ),
        pytest.param("2030-01-01", "2030-01-01", "from must be before to", id="empty"),
        pytest.param(
            "2030-13-01", "2030-14-01", "from '2030-13-01' is not a calendar date", id="no such date"
        ),
        pytest.param("2030-02-30", "2030-03-01", "is not a calendar date", id="30 February"),
        pytest.param(
            "yesterday", "2030-01-01", "from 'yesterday' is not a date (2030-01-01) or an ISO", id="words"
        ),
        pytest.param("2030-01-01T00:00:00", "2030-01-02", "from must carry a timezone", id="no offset"),
        pytest.param("2030-01-01", "2031-01-03", "a period is at most 366 days long", id="too long"),
        pytest.param("2030-01-01", None, "give both from and to, or neither", id="one missing"),
        pytest.param("", "2030-01-01", "from must be a date such as 2030-01-01", id="empty text"),
        pytest.param("9" * 100, "2030-01-01", "from is 100 characters long", id="too long to read"),
        pytest.param(3, "2030-01-01", "from must be a date", id="not text"),
    ],
)
def test_a_bad_period_is_invalid_input_naming_the_bound(since: object, until: object, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        period(since, until, T0)
    assert message in refused.value.message


def test_a_leap_year_fits_in_one_period() -> None:
    assert period("2028-01-01", "2029-01-01", T0).duration is not None


@pytest.mark.parametrize("text", ["2.50", "0", "0.000000001", "123456789012345"])
def test_a_price_is_kept_as_written(text: str) -> None:
    assert check_per_hour(text) == text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("-1", "perHour must not be negative", id="negative"),
        pytest.param("-0.50", "perHour must not be negative", id="negative decimal"),
        pytest.param("1e3", "perHour must be a decimal string such as 2.50", id="exponent"),
        pytest.param("NaN", "perHour must be a decimal string", id="nan"),
        pytest.param("1.2.3", "perHour must be a decimal string", id="two points"),
        pytest.param("0.0000000001", "perHour must be a decimal string", id="ten decimals"),
        pytest.param(2.5, 'perHour must be a decimal string such as "2.50"', id="a number"),
        pytest.param("9" * 40, "perHour is 40 characters long", id="too long"),
    ],
)
def test_a_bad_price_is_refused(value: object, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_per_hour(value)
    assert message in refused.value.message
    assert refused.value.details["field"] == "perHour"


def test_a_currency_is_three_letters_of_iso_4217() -> None:
    assert check_currency("usd") == "USD"
    for bad in ("US", "DOLLARS", "U$D", "€", 3, ""):
        with pytest.raises(InvalidInput, match="currency must be an ISO 4217 code"):
            check_currency(bad)


def price(meter: str, per_hour: str, currency: str = "USD") -> Price:
    return Price(meter, per_hour, currency, T0)


def test_an_amount_is_rounded_once_to_the_currencys_minor_unit() -> None:
    seed = Fraction(13, 14)
    assert amount(seed, price("m", "2.50")) == Decimal("2.32")  # 2.3214...
    assert amount(seed, price("m", "1000", "JPY")) == Decimal(929)
    assert amount(seed, price("m", "1", "BHD")) == Decimal("0.929")
    assert amount(Fraction(1, 8), price("m", "0.1")) == Decimal("0.01")  # 0.0125 rounds half up


def test_a_bill_has_a_line_per_meter_and_a_total_in_one_currency() -> None:
    used = {"gpu.h100.hours": Fraction(13, 14), "gpu.a100.hours": Fraction(3, 2)}
    prices = {
        "gpu.h100.hours": price("gpu.h100.hours", "2.50"),
        "gpu.a100.hours": price("gpu.a100.hours", "1.10"),
    }
    bill = rate("acme", period(None, None, T0), used, prices)
    assert [(line.meter, line.hours, line.amount) for line in bill.lines] == [
        ("gpu.a100.hours", Fraction(3, 2), Decimal("1.65")),
        ("gpu.h100.hours", Fraction(13, 14), Decimal("2.32")),
    ]
    assert bill.total == Decimal("3.97")


def test_no_total_without_a_price_for_every_line_or_across_currencies() -> None:
    used = {"a": Fraction(1), "b": Fraction(1)}
    month = period(None, None, T0)
    unpriced = rate("acme", month, used, {"a": price("a", "1")})
    assert [line.amount for line in unpriced.lines] == [Decimal("1.00"), None]
    assert unpriced.total is None
    mixed = rate("acme", month, used, {"a": price("a", "1"), "b": price("b", "1", "EUR")})
    assert mixed.total is None
    assert rate("acme", month, {}, {}).lines == () and rate("acme", month, {}, {}).total is None
