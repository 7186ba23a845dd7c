"""Capacity reads: `capacity.free` (what a pool could book for a window, and when),
`capacity.accounting` (every GPU-hour of a range by state) and the rollups `capacity.summary`,
`capacity.byPool` and `capacity.timeline`."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest


class CapacityFreeQuery(WireRequest):
    """`capacity.free` (query parameters): a pool's id, optionally an atom class, the window
    (`from`, default now; `to`, default an hour after `from`) and how many atoms must start together
    (`count`, 1 to 4096)."""

    pool: str
    cls: str | None = Field(default=None, alias="class")
    from_: datetime | None = Field(default=None, alias="from")
    to: datetime | None = None
    count: int = Field(default=1, ge=1, le=4096)


class FreeKindPublic(WireAnswer):
    """One kind of atom: how many the pool has, how many are free for the whole window, and the
    earliest start at or after `from` at which `count` of them are free for the window's length
    (null: never, as things are booked now)."""

    cls: str = Field(alias="class")
    gpu_model: str | None = None
    mig_profile: str | None = None
    atoms: int
    free: int
    earliest_start: datetime | None = None


class CapacityFree(WireAnswer):
    pool_id: str
    from_: datetime = Field(alias="from")
    to: datetime
    count: int
    kinds: list[FreeKindPublic]


class CapacityAccountingQuery(WireRequest):
    """`capacity.accounting` (query parameters): a pool (`poolId`; left out, every pool the token
    may see), the range `from` to `to` (ISO 8601 with a zone) and the bucket (`1h`, `1d`, `PT30M`;
    default 1h), at most 1000 buckets."""

    pool_id: str | None = None
    from_: datetime = Field(alias="from")
    to: datetime
    bucket: str | None = None


class StateHoursPublic(WireAnswer):
    """GPU-hours by state, as decimal strings rounded to 6 places; unrounded, the five states sum
    exactly to `capacity`."""

    capacity: str
    booked: str
    free: str
    changing: str
    unhealthy: str
    cordoned: str


class AccountingBucket(WireAnswer):
    from_: datetime = Field(alias="from")
    to: datetime
    hours: StateHoursPublic


class CapacityAccounting(WireAnswer):
    """Every GPU-hour of the range in exactly one state, per bucket and in total."""

    pool_id: str | None = None
    from_: datetime = Field(alias="from")
    to: datetime
    bucket: str
    buckets: list[AccountingBucket]
    total: StateHoursPublic


class CapacitySummaryQuery(WireRequest):
    """`capacity.summary` (query parameters): optionally one pool (`poolId`)."""

    pool_id: str | None = None


class ModelCountPublic(WireAnswer):
    """Whole GPUs of one model: present, bookable as a whole GPU, booked whole now, unhealthy."""

    model: str
    total: int
    bookable: int
    booked: int
    unhealthy: int


class CapacitySummary(WireAnswer):
    at: datetime
    pool_id: str | None = None
    models: list[ModelCountPublic]


class CapacityByPoolQuery(WireRequest):
    """`capacity.byPool` (query parameters): optionally one pool (`poolId`)."""

    pool_id: str | None = None


class PoolClassCountPublic(WireAnswer):
    """Atoms of one class in one pool: present, bookable, held by a tenant's booking now."""

    pool_id: str
    cls: str = Field(alias="class")
    total: int
    bookable: int
    booked: int


class CapacityByPool(WireAnswer):
    at: datetime
    rows: list[PoolClassCountPublic]


class CapacityTimelineQuery(WireRequest):
    """`capacity.timeline` (query parameters): as `capacity.accounting`'s."""

    pool_id: str | None = None
    from_: datetime = Field(alias="from")
    to: datetime
    bucket: str | None = None


class TimelineBucket(WireAnswer):
    """Whole GPUs booked in one bucket: the most at once (`booked`) and their GPU-hours (`hours`,
    a decimal string rounded to 6 places)."""

    from_: datetime = Field(alias="from")
    to: datetime
    booked: int
    hours: str


class CapacityTimeline(WireAnswer):
    pool_id: str | None = None
    from_: datetime = Field(alias="from")
    to: datetime
    bucket: str
    buckets: list[TimelineBucket]
