"""Usage, bills and prices: GPU-hours per booking and per meter, and what a meter's hour costs.

Hours, shares and money travel as decimal strings, never as JSON numbers: a float cannot hold 3/7
or 0.1 exactly, and a bill must add up. `hours` is rounded to 6 places (`0.928571`), an amount to
its currency's minor unit; the sums behind them are exact (docs/billing.md).

`from` and `to` are a date (`2030-01-01`, midnight UTC) or an ISO 8601 timestamp with its offset;
left out together, the period is the current calendar month (UTC). A period is at most 366 days.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.quotas import AtomClass

# The server's limits, as its domain checks them (domain.metering.billing); declared here for the OpenAPI
# document only, so that a refusal past them is the domain's message, naming the field and limit.
MAX_PERIOD_DAYS = 366
MAX_BOUND_TEXT = 64
MAX_PRICE_TEXT = 32
MAX_METER = 64

PeriodBound = str | None
"""`from` or `to`: `2030-01-01` or `2030-01-01T00:00:00Z`."""


class UsageListQuery(WireRequest):
    """`usage.list` (query parameters): a page of usage rows, one per booking with time held in the
    period, in booking order. A tenant token sees its own rows only; the admin every tenant's, or
    `tenantId`'s."""

    tenant_id: str | None = None
    pool_id: str | None = None
    from_: PeriodBound = Field(default=None, alias="from", json_schema_extra={"maxLength": MAX_BOUND_TEXT})
    to: PeriodBound = Field(default=None, json_schema_extra={"maxLength": MAX_BOUND_TEXT})
    limit: PageLimit = None
    cursor: PageCursor = None
    slurm_job_ids: bool = False
    """Add each row's `slurmJobId`: the Slurm job that held the booking's allocation, where one did."""


class UsageRowPublic(WireAnswer):
    """What one booking held in the period: `start` to `end` is its time inside the period (an
    open-ended booking up to now), `share` its atom's share of a GPU (`1`, `1/4`, `3/7`), and
    `hours` the GPU-hours it bills on `meter`: share x held time, rounded to 6 places."""

    booking_id: str
    reservation_id: str
    tenant_id: str
    pool_id: str | None
    atom_id: str
    cls: AtomClass = Field(alias="class")
    gpu_model: str | None
    meter: str
    share: str
    start: datetime
    end: datetime
    hours: str
    slurm_job_id: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """The Slurm job that held the allocation (asked for with `slurmJobIds`; absent where none)."""


class BillQuery(WireRequest):
    """`bills.get`: the tenant's bill for `[from, to)` (both left out: the current calendar month)."""

    tenant_id: str
    from_: PeriodBound = Field(default=None, alias="from", json_schema_extra={"maxLength": MAX_BOUND_TEXT})
    to: PeriodBound = Field(default=None, json_schema_extra={"maxLength": MAX_BOUND_TEXT})


class BillLinePublic(WireAnswer):
    """One meter of a bill: its GPU-hours (6 places), and, when the meter has a price, their cost
    (rounded to the currency's minor unit) and the currency."""

    meter: str
    hours: str
    amount: str | None = Field(default=None, exclude_if=lambda v: v is None)
    currency: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ShowbackLinePublic(WireAnswer):
    """One component's part of its endpoint's cost in the period: its copies' GPU-hours (each copy's
    partition share of its GPU times the time it held it, 6 places) and, when the endpoint has a
    price, their cost at the endpoint's price per GPU-hour (2 places; the endpoint's price names no
    currency, so neither does this)."""

    endpoint: str
    component: str
    gpu_hours: str
    amount: str | None = Field(default=None, exclude_if=lambda v: v is None)


class BillPublic(WireAnswer):
    """A tenant's bill: one line per meter used in the period. `total`, the sum of the lines'
    amounts, is there when every line has an amount in one currency. `showback` splits the
    tenant's inference endpoints' cost per component, beside the lines (not in the total)."""

    tenant_id: str
    from_: datetime = Field(alias="from")
    to: datetime
    lines: list[BillLinePublic]
    total: str | None = Field(default=None, exclude_if=lambda v: v is None)
    showback: list[ShowbackLinePublic] = Field(default_factory=list)


class PriceSet(WireRequest):
    """`prices.set` (admin): what one hour of `meter` costs, as a non-negative decimal string
    (`"2.50"`, up to 15 digits and 9 decimals), in an ISO 4217 `currency` (`USD`)."""

    meter: str = Field(json_schema_extra={"maxLength": MAX_METER})
    per_hour: str = Field(json_schema_extra={"maxLength": MAX_PRICE_TEXT})
    currency: str = Field(json_schema_extra={"maxLength": 3})


class PricePublic(WireAnswer):
    meter: str
    per_hour: str
    currency: str
    updated_at: datetime


class PriceListQuery(WireRequest):
    """`prices.list` (query parameters)."""

    limit: PageLimit = None
    cursor: PageCursor = None


class UsageReportQuery(WireRequest):
    """`usage.report` (admin; query parameters): the calendar month `YYYY-MM` (UTC; default: the
    current one)."""

    month: str | None = Field(default=None, max_length=7, description="YYYY-MM, e.g. 2026-11.")


class UsageReportTenantPublic(WireAnswer):
    """One tenant's month: GPU-hours (6 places) and bookings; `shareOfFleet`, its hours over the
    fleet's capacity hours that month (up to now), and `shareOfUse`, over all tenants' hours (6
    places; null with nothing to divide by); `lines` per meter, priced as its bill is, and `total`
    in `currency` when one currency prices every line."""

    tenant_id: str
    hours: str
    bookings: int
    share_of_fleet: str | None
    share_of_use: str | None
    lines: list[BillLinePublic]
    total: str | None = None
    currency: str | None = None


class UsageReportPublic(WireAnswer):
    """`usage.report`: every tenant that held time in the month, most GPU-hours first, as Slurm's
    `sreport cluster AccountUtilizationByUser`. `capacityHours`: the fleet's GPU-hours while its GPUs
    were present (`capacity.accounting`), up to now; `usedHours`: all tenants' hours; `total`, the
    month's cost when one currency prices it all."""

    month: str
    from_: datetime = Field(alias="from")
    to: datetime
    capacity_hours: str
    used_hours: str
    tenants: list[UsageReportTenantPublic]
    total: str | None = None
    currency: str | None = None
