"""Partition bookings (admin): a GPU's whole family of atoms held for a window (the atom rule)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest
from better_compute.wire.reservations import MAX_DURATION_TEXT

MAX_PARTITION_DAYS = 30
"""The longest window, in days, as `domain.ledger.ledger.MAX_PARTITION_WINDOW` checks it (a test keeps
them equal); declared here for the OpenAPI document only."""


class PartitionBook(WireRequest):
    """`partitions.book` (admin): hold every atom of GPU `gpuId`, parent included, from `start`
    (default now; up to a minute in the past is read as now) to `end`, or for `duration` (like `4h`):
    exactly one of the two, at most 30 days. While it holds, nothing new lands on the GPU."""

    gpu_id: str = Field(min_length=1)
    start: datetime | None = None
    end: datetime | None = None
    duration: str | None = Field(default=None, json_schema_extra={"maxLength": MAX_DURATION_TEXT})


class PartitionRelease(WireRequest):
    """`partitions.release` (admin): the booking's id (`partition:<gpuId>:<start>`, or the id of
    one of its bookings)."""

    booking_id: str | None = Field(default=None, description="The path's booking id; may be left out.")


class PartitionBookingPublic(WireAnswer):
    """What `partitions.book` answers: `booked` (201) with the booking's id, its window and the
    atoms it holds, or `conflict` (200) when something of the GPU is booked in the window, with
    `freeFrom`: the earliest start at which a window of that length is free for the whole family
    (null when it never is, behind a booking that never ends)."""

    status: Literal["booked", "conflict"]
    gpu_id: str
    booking_id: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    atoms: list[str] = Field(default_factory=list)
    free_from: datetime | None = None


class PartitionReleasedPublic(WireAnswer):
    """What `partitions.release` answers: the booking's id, its GPU and how many of its atom
    bookings were ended or cancelled (0 when it had ended already)."""

    status: Literal["released"] = "released"
    booking_id: str
    gpu_id: str
    ended: int
