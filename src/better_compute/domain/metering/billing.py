"""Billing: the period a bill covers, prices per meter, and the bill itself (hours x price).

A bill adds up exactly: its hours per meter are the exact sums of its bookings' GPU-hours
(`domain.metering.metering`), each rounded only when shown. Money is rounded once per line, to the
currency's minor unit, and the total is the sum of the lines as shown, so a bill read on paper
adds up to the cent (docs/billing.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window, require_aware
from better_compute.domain.metering.metering import rounded
from better_compute.domain.metering.showback import ShowbackLine

MAX_PERIOD = timedelta(days=366)
"""The longest period one bill or usage read covers: a year, leap day included. A longer one is
refused rather than read: the aggregate's cost grows with the ledger it scans."""

MAX_BOUND_TEXT = 64
"""The longest `from` or `to` read, in characters (`2030-01-01T00:00:00.000000+00:00` is 32)."""

MAX_PRICE_TEXT = 32
"""The longest `perHour` read, in characters."""

PRICE_DIGITS = 15
PRICE_DECIMALS = 9
_PRICE = re.compile(rf"^\d{{1,{PRICE_DIGITS}}}(?:\.\d{{1,{PRICE_DECIMALS}}})?$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

MINOR_UNITS: Mapping[str, int] = {
    **dict.fromkeys(
        ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV"),
        0,
    ),
    **dict.fromkeys(("XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}
"""ISO 4217 currencies whose minor unit is not the cent; every other code is rounded to 2 places."""


def minor_units(currency: str) -> int:
    """Decimal places an amount in `currency` is rounded to (2 unless ISO 4217 says otherwise)."""
    return MINOR_UNITS.get(currency, 2)


# -- Periods ---------------------------------------------------------------------------------------


def month_of(now: datetime) -> Window:
    """The calendar month (UTC) that `now` falls in: the default period of a bill."""
    at = now.astimezone(UTC)
    start = datetime(at.year, at.month, 1, tzinfo=UTC)
    end = datetime(at.year + at.month // 12, at.month % 12 + 1, 1, tzinfo=UTC)
    return Window(start, end)


def parse_bound(text: object, field: str) -> datetime:
    """One end of a period: a date (`2030-01-01`, midnight UTC) or an ISO 8601 timestamp with its
    offset (`2030-01-01T00:00:00Z`)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(
            f"{field} must be a date such as 2030-01-01 or an ISO 8601 timestamp", {"field": field}
        )
    if len(text) > MAX_BOUND_TEXT:
        raise InvalidInput(
            f"{field} is {len(text)} characters long; a date or timestamp is at most {MAX_BOUND_TEXT}",
            {"field": field, "maxLength": MAX_BOUND_TEXT},
        )
    raw = text.strip()
    if _DATE.match(raw):
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            raise InvalidInput(
                f"{field} {text!r} is not a calendar date (such as 2030-01-31)",
                {"field": field, "value": text},
            ) from None
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(
            f"{field} {text!r} is not a date (2030-01-01) or an ISO 8601 timestamp with its offset"
            " (2030-01-01T00:00:00Z)",
            {"field": field, "value": text},
        ) from None
    return require_aware(value, field)


def period(from_text: object, to_text: object, now: datetime) -> Window:
    """The period `[from, to)` a bill or a usage read covers; both left out: the calendar month
    of `now` (UTC). `from` must come before `to`, and the two at most MAX_PERIOD apart."""
    if from_text is None and to_text is None:
        return month_of(now)
    if from_text is None or to_text is None:
        missing = "from" if from_text is None else "to"
        raise InvalidInput(
            f"give both from and to, or neither for the current calendar month; {missing} is missing",
            {"field": missing},
        )
    start, end = parse_bound(from_text, "from"), parse_bound(to_text, "to")
    if start >= end:
        raise InvalidInput(
            f"from must be before to: from {_iso(start)}, to {_iso(end)}",
            {"field": "from", "from": _iso(start), "to": _iso(end)},
        )
    if end - start > MAX_PERIOD:
        raise InvalidInput(
            f"a period is at most {MAX_PERIOD.days} days long; from {_iso(start)} to {_iso(end)} is "
            f"{(end - start).days} days: ask for it in parts",
            {"field": "to", "maxDays": MAX_PERIOD.days},
        )
    return Window(start, end)


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


# -- Prices ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Price:
    """What one hour of a meter costs: `per_hour` exactly as set (a decimal string), in `currency`."""

    meter: str
    per_hour: str
    currency: str
    updated_at: datetime

    @property
    def rate(self) -> Fraction:
        return Fraction(Decimal(self.per_hour))


def check_per_hour(value: object, field: str = "perHour") -> str:
    """`perHour` as sent (or another price per hour, named `field`): a non-negative decimal string
    such as `2.50`, kept as written so that it is stored and shown exactly (a float would not be)."""
    if not isinstance(value, str):
        raise InvalidInput(f'{field} must be a decimal string such as "2.50"', {"field": field})
    if len(value) > MAX_PRICE_TEXT:
        raise InvalidInput(
            f"{field} is {len(value)} characters long; a price is at most {MAX_PRICE_TEXT}",
            {"field": field, "maxLength": MAX_PRICE_TEXT},
        )
    text = value.strip()
    if text.startswith("-") and _PRICE.match(text[1:]):
        raise InvalidInput(f"{field} must not be negative, not {value!r}", {"field": field, "value": value})
    if not _PRICE.match(text):
        raise InvalidInput(
            f"{field} must be a decimal string such as 2.50 (up to {PRICE_DIGITS} digits, a point and up"
            f" to {PRICE_DECIMALS} decimals), not {value!r}",
            {"field": field, "value": value},
        )
    return text


def check_currency(value: object) -> str:
    """An ISO 4217 code (`USD`, `EUR`); lower case is read as upper case."""
    field = "currency"
    text = value.strip().upper() if isinstance(value, str) else None
    if text is None or not _CURRENCY.match(text):
        shown = repr(value) if isinstance(value, str) and len(value) <= MAX_PRICE_TEXT else "that"
        raise InvalidInput(
            f"currency must be an ISO 4217 code of three letters such as USD or EUR, not {shown}",
            {"field": field},
        )
    return text


# -- Bills -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BillLine:
    """One meter of a bill: its exact GPU-hours, and what they cost when the meter has a price."""

    meter: str
    hours: Fraction
    amount: Decimal | None = None
    currency: str | None = None


@dataclass(frozen=True, slots=True)
class Bill:
    """A tenant's bill for a period: one line per meter it used, and the total when every line has
    an amount in one currency (amounts in different currencies do not add up)."""

    tenant_id: str
    period: Window
    lines: tuple[BillLine, ...]
    total: Decimal | None = None
    showback: tuple[ShowbackLine, ...] = ()
    """The tenant's endpoints' cost split per component (`domain.metering.showback`): shown beside the
    lines, not added to the total (the endpoint's price carries no meter or currency)."""


def amount(hours: Fraction, price: Price) -> Decimal:
    """What `hours` of the price's meter cost, rounded half up to the currency's minor unit."""
    return rounded(hours * price.rate, minor_units(price.currency))


def rate(
    tenant_id: str, within: Window, hours_by_meter: Mapping[str, Fraction], prices: Mapping[str, Price]
) -> Bill:
    """The bill of `hours_by_meter` at `prices` (meters without a price show hours only)."""
    lines = []
    for meter in sorted(hours_by_meter):
        used = hours_by_meter[meter]
        price = prices.get(meter)
        if price is None:
            lines.append(BillLine(meter, used))
        else:
            lines.append(BillLine(meter, used, amount(used, price), price.currency))
    currencies = {line.currency for line in lines}
    total = None
    if lines and None not in currencies and len(currencies) == 1:
        total = sum((line.amount for line in lines if line.amount is not None), Decimal(0))
    return Bill(tenant_id, within, tuple(lines), total)
