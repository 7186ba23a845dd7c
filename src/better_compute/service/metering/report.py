"""`usage.report` (admin): every tenant's GPU-hours, share of the fleet and cost for one calendar month
in one answer (`domain.metering.report`), read from the same held totals as the bills and from the
same capacity accounting as `capacity.accounting`, so the three always agree."""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import Grid
from better_compute.domain.metering.billing import month_of
from better_compute.domain.metering.report import UsageReport, month_window, usage_report
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger import capacity
from better_compute.service.metering.ports import MeteringTx


def report(
    store: StorePort[MeteringTx], principal: Principal, month: str | None, now: datetime
) -> UsageReport:
    """The report of `month` (`YYYY-MM`; None: the current one). Capacity counts up to `now`, as
    used time does: a month under way is shared out of the hours gone by, not of the whole month."""
    require_admin(principal, "usage.report")
    period = month_of(now) if month is None else month_window(month)
    with store.read() as tx:
        totals = tx.usage.totals(period, now, None, None)
        meters = {p.id: p.meter for p in tx.pools.all()}
        prices = {p.meter: p for p in tx.prices.all()}
    return usage_report(period, totals, meters, prices, _capacity_hours(store, principal, period, now))


def _capacity_hours(
    store: StorePort[MeteringTx], principal: Principal, period: Window, now: datetime
) -> Fraction:
    assert period.end is not None, "a month ends"
    end = min(period.end, now)
    if end <= period.start:
        return Fraction(0)
    grid = Grid(Window(period.start, end), end - period.start, "month")
    return capacity.accounting(store, principal, None, grid).total.capacity
