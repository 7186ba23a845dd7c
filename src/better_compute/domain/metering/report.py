"""The usage report: every tenant's GPU-hours of a calendar month in one table, as Slurm's
`sreport cluster AccountUtilizationByUser` gives each account's share of a cluster.

Each tenant's rows are its bill (`billing.rate` over the same held totals, so the report and the
bills of the month always agree), one line per meter, with its share of the fleet's capacity that
month (`accounting`'s GPU-hours while GPUs were present, up to now) and of everything used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.billing import Bill, Price, rate
from better_compute.domain.metering.metering import HeldTotal, hours_by_meter

MONTH_TEXT = 7
"""`YYYY-MM`: the only form a report's month takes (longer text is refused unread)."""

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def month_window(text: object, field: str = "month") -> Window:
    """The calendar month (UTC) `YYYY-MM` names, as a window `[first day, first day of the next)`."""
    if not isinstance(text, str) or len(text) > MONTH_TEXT or not (found := _MONTH.match(text)):
        raise InvalidInput(f"{field} must be YYYY-MM, such as 2026-11", {"field": field})
    year, month = int(found[1]), int(found[2])
    if not 1 <= month <= 12 or not 1 <= year <= 9998:
        raise InvalidInput(f"{field} {text} is not YYYY-MM with MM from 01 to 12", {"field": field})
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Window(start, end)


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """One tenant's month: its bill (lines per meter, total when one currency prices them all), the
    bookings that held time, and its GPU-hours' share of the fleet's capacity and of all use (None
    when there was no capacity, or no use, to divide by)."""

    bill: Bill
    bookings: int
    share_of_fleet: Fraction | None
    share_of_use: Fraction | None

    @property
    def hours(self) -> Fraction:
        return sum((line.hours for line in self.bill.lines), Fraction(0))


@dataclass(frozen=True, slots=True)
class UsageReport:
    """The month's report: a row per tenant that held time, most GPU-hours first (then by id)."""

    period: Window
    capacity_hours: Fraction
    used_hours: Fraction
    tenants: tuple[TenantUsage, ...]


def share(part: Fraction, whole: Fraction) -> Fraction | None:
    return part / whole if whole > 0 else None


def usage_report(
    period: Window,
    totals: Iterable[HeldTotal],
    meter_of: Mapping[str, str],
    prices: Mapping[str, Price],
    capacity_hours: Fraction,
) -> UsageReport:
    """The report of `totals` (held time per tenant, pool and share in `period`), each pool's meter
    and the meters' prices, against the fleet's `capacity_hours` in the period."""
    by_tenant: dict[str, list[HeldTotal]] = {}
    for total in totals:
        by_tenant.setdefault(total.tenant_id, []).append(total)
    bills = {
        tenant: (rate(tenant, period, hours_by_meter(held, meter_of), prices), sum(t.bookings for t in held))
        for tenant, held in by_tenant.items()
    }
    used = sum((line.hours for bill, _ in bills.values() for line in bill.lines), Fraction(0))
    rows = []
    for bill, bookings in bills.values():
        hours = sum((line.hours for line in bill.lines), Fraction(0))
        rows.append(TenantUsage(bill, bookings, share(hours, capacity_hours), share(hours, used)))
    rows.sort(key=lambda r: (-r.hours, r.bill.tenant_id))
    return UsageReport(period, capacity_hours, used, tuple(rows))


def total_cost(report: UsageReport) -> tuple[Decimal, str] | None:
    """What the whole month cost, when every tenant's bill has a total in one and the same currency."""
    currencies = {line.currency for row in report.tenants for line in row.bill.lines}
    if not report.tenants or None in currencies or len(currencies) != 1:
        return None
    amounts = [row.bill.total for row in report.tenants]
    if any(a is None for a in amounts):
        return None
    (currency,) = currencies
    assert currency is not None
    return sum((a for a in amounts if a is not None), Decimal(0)), currency
