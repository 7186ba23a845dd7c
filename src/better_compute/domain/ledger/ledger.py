"""The booking ledger's rules that need no database: windows, when an atom is next free, the atom rule.

The database enforces exclusivity (docs/concepts.md#the-ledger); this module decides what to tell a
user when it refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window, parse_duration, require_aware, window_for
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


MAX_PARTITION_WINDOW = timedelta(days=30)
"""The longest window `partitions.book` holds a GPU for. A maintenance window is hours or days; one
that runs longer is booked again (or released early with `partitions.release`), so a forgotten
booking cannot keep a GPU out of service for good. The layout gate's own holds are open-ended and
are not made through it."""


def partition_window(
    start: datetime | None, end: datetime | None, duration: str | None, now: datetime
) -> Window:
    """The window an operator's `partitions.book` asks for: from `start` (default now) to `end`, or
    for `duration` (exactly one of the two).

    The start follows a reservation's rule (`timewin.window_for`): up to a minute in the past is
    moved to now, further back is refused, since the family's past is no longer free to take. The
    window is at most MAX_PARTITION_WINDOW long and never open-ended.
    """
    if (end is None) == (duration is None):
        raise InvalidInput(
            "give the window's end or its duration (exactly one of end and duration)",
            {"field": "end" if end is not None else "duration"},
        )
    if duration is not None:
        window = window_for(start, parse_duration(duration), now)
    else:
        assert end is not None
        begin = window_for(start, None, now).start
        finish = require_aware(end, "end")
        if finish <= begin:
            raise InvalidInput(
                f"end {finish.isoformat()} must be after start {begin.isoformat()}",
                {"field": "end", "start": begin.isoformat(), "end": finish.isoformat()},
            )
        window = Window(begin, finish)
    assert window.duration is not None
    if window.duration > MAX_PARTITION_WINDOW:
        raise InvalidInput(
            f"a partition booking lasts at most {MAX_PARTITION_WINDOW.days} days, not"
            f" {_days(window.duration)}; book the rest again later, or release it early",
            {"field": "end" if end is not None else "duration", "maxDays": MAX_PARTITION_WINDOW.days},
        )
    return window


def _days(length: timedelta) -> str:
    return f"{length.total_seconds() / 86_400:.4g} days"


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
