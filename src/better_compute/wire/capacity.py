"""`capacity.free`: what a pool could book for a window, per kind of atom, and when."""

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
