"""Quota rows: how many atoms of one class a tenant may hold at once in one pool."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest

AtomClass = Literal["gpu", "gpu.mig", "gpu.slot"]
"""What a device request asks for and what quota is kept in: whole GPUs, MIG instances, shared slots."""

ClassQuota = dict[AtomClass, int]
"""A limit per atom class, e.g. `{"gpu": 8, "gpu.mig": 14}` (`ownerQuota`, `pools.offer`)."""


class QuotaSet(WireRequest):
    """`quotas.set`: create or replace the row for (tenant, pool, class)."""

    tenant_id: str
    pool_id: str
    cls: AtomClass = Field(alias="class")
    limit: int = Field(ge=0)


class QuotaPublic(WireAnswer):
    tenant_id: str
    pool_id: str
    cls: AtomClass = Field(alias="class")
    limit: int
    # Only quotas.list knows it: the other answers that carry quota rows leave it out, not null.
    used: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """How many of the class the tenant holds in the pool now (`quotas.list`; absent elsewhere)."""


class QuotaListQuery(WireRequest):
    """`quotas.list` filters (query parameters). With `from` (and `to`, default an hour later),
    `used` is the most the tenant holds at once during that window instead of now."""

    tenant_id: str | None = None
    pool_id: str | None = None
    from_: datetime | None = Field(default=None, alias="from")
    to: datetime | None = None
    limit: PageLimit = None
    cursor: PageCursor = None
