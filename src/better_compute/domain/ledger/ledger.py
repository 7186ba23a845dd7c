"""The booking ledger's rules that need no database: windows, when an atom is next free, the atom rule.

The database enforces exclusivity (docs/concepts.md#the-ledger); this module decides what to tell a
user when it refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.choose import earliest_common_start


@dataclass(frozen=True)
class Booking:
    """One claim on one atom."""

    id: str
    atom_id: str
    gpu_id: str
    allocation_id: str
    tenant_id: str | None
    span: Window
    state: str = "live"


def earliest_free(busy: Iterable[Window], wanted: Window) -> datetime | None:
    """The earliest start at or after `wanted.start` at which a window of `wanted`'s length is free.

    None when nothing is ever free again (an open-ended booking, or an open-ended request that can
    only follow bookings that never end).
    """
    return earliest_common_start({"atom": list(busy)}, 1, wanted.duration, wanted.start)


def released(span: Window, at: datetime) -> Window | None:
    """What a live booking becomes when its allocation is released at `at`: one that has started is
    cut to end at `at` (one already over keeps its end), one that has not started is cancelled
    (None). The ledger's SQL (storage.ledger.ledger.end_allocation) and the booking index apply this rule;
    a test holds both to it."""
    if span.start >= at:
        return None
    if span.end is None or span.end > at:
        return Window(span.start, at)
    return span


PARTITION_PREFIX = "partition:"


def partition_allocation_id(gpu_id: str, start: datetime) -> str:
    """The allocation id of a partition change: `partition:<gpuId>:<start>` (ISO 8601 UTC start)."""
    return f"{PARTITION_PREFIX}{gpu_id}:{start.astimezone(UTC).isoformat().replace('+00:00', 'Z')}"


def is_partition_change(allocation_id: str) -> bool:
    """Whether a booking is a partition change's (it holds its GPU's whole family; no tenant's)."""
    return allocation_id.startswith(PARTITION_PREFIX)


def family_excludes(cls: str, other_cls: str) -> bool:
    """Whether live bookings of two different atoms of one GPU, of these classes, may not meet in
    time (docs/concepts.md#the-atom-rule): a GPU is held whole (`gpu`) or in parts, never both at once, and
    in parts of one kind (MIG instances, or slots), so two atoms of different classes exclude each
    other; two parts of one kind do not. One allocation never excludes itself: a layout change's
    hold, or an endpoint's, books a whole family at once. The ledger's fences hold every booking to
    this (PostgreSQL's `bookings_no_family_overlap`, SQLite's look-up before an insert), and
    admission counts the bookings of a GPU's family by it (`service.ledger.booking_index`)."""
    return cls != other_cls


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether an atom is booked at an instant, and when it is next free.

    `next_free_at` is the instant itself when the atom is free then, the end of the chain of
    back-to-back bookings covering it otherwise, and None when that chain never ends (an
    open-ended booking): waiting will not free it.
    """

    booked_now: bool
    next_free_at: datetime | None


def availability(busy: Iterable[Window], at: datetime) -> Availability:
    """`Availability` of one atom at `at`, from its live bookings (any order, any overlap)."""
    spans = sorted(busy, key=lambda w: w.start)
    free_at: datetime | None = at
    for span in spans:
        if free_at is None or span.start > free_at:
            break
        if span.end is None or span.end > free_at:
            free_at = span.end
    return Availability(booked_now=any(w.contains(at) for w in spans), next_free_at=free_at)
