"""Metering: how many GPU-hours a booking holds in a period.

Bills must be exact to the fraction (a 3g.40gb on an H100 is 3/7 of it, not 0.43), so every share
and every sum is a `fractions.Fraction`; only `shown` rounds, for display (docs/billing.md).

An atom's share of a GPU is fleet's rule (`domain.fleet.shares.share`); what is billed is that share
times the hours held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window

HOURS_PLACES = 6
"""Decimal places hours are shown with (`0.928571`); sums are exact before that."""

MICROSECONDS_PER_HOUR = 3_600_000_000
"""The ledger keeps times to the microsecond, so held time is an exact count of them."""

UNMETERED = "gpu.hours"
"""The meter of a booking whose pool is gone (a pool with reservations cannot be deleted, so only a
booking written by hand has none)."""


def held(span: Window, period: Window, now: datetime) -> Window | None:
    """The part of a live booking's window `span` that bills in `period`: from its start to its
    end (an open-ended booking up to `now`), inside the period; None when nothing of it is.

    A released booking's span was already cut to its release (`domain.ledger.ledger.released`) and a
    cancelled one bills nothing, so only live bookings are asked about. The usage statements of
    storage.metering.usage compute the same in SQL; a test holds them to this rule.
    """
    end = now if span.end is None else span.end
    assert period.end is not None, "a period has an end"
    lo, hi = max(span.start, period.start), min(end, period.end)
    return Window(lo, hi) if lo < hi else None


def microseconds(length: timedelta) -> int:
    """A duration as a whole number of microseconds (exact: a timedelta is one)."""
    return (length.days * 86_400 + length.seconds) * 1_000_000 + length.microseconds


def hours(atom_share: Fraction, held_microseconds: int) -> Fraction:
    """GPU-hours of an atom of `atom_share` held for that many microseconds, exactly."""
    return atom_share * Fraction(held_microseconds, MICROSECONDS_PER_HOUR)


def shown(value: Fraction, places: int = HOURS_PLACES) -> str:
    """`value` as a decimal string of `places` places, rounded half up (`0.928571`); the one
    rounding metering does, at the edge."""
    return str(rounded(value, places))


def rounded(value: Fraction, places: int) -> Decimal:
    """`value` rounded half up (away from zero) to `places` decimal places, as an exact Decimal."""
    scaled = abs(Fraction(value)) * 10**places
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if rest * 2 >= scaled.denominator:
        whole += 1
    # Built from its digits, so no Decimal context (28 digits) rounds it again.
    sign = 1 if value < 0 and whole else 0
    return Decimal((sign, tuple(int(d) for d in str(whole)), -places))


@lru_cache(maxsize=1024)
def parse_share(text: str) -> Fraction:
    """A share as storage writes it (`str(Fraction)`: `1`, `3/7`). Cached: a fleet has a handful of
    distinct shares, read back by the ten thousand (a GPU's history holds one per atom), and
    parsing a Fraction from text costs ten times a dictionary look-up."""
    return Fraction(text)


@dataclass(frozen=True, slots=True)
class MeteredBooking:
    """A live booking of a tenant's, as metering reads it from the ledger: who held which atom of
    which pool, at what share of a GPU, on which meter, and its window as it stands (cut at its
    release, if released)."""

    booking_id: str
    reservation_id: str
    tenant_id: str
    pool_id: str | None
    atom_id: str
    cls: str
    gpu_model: str | None
    meter: str
    share: Fraction
    span: Window


@dataclass(frozen=True, slots=True)
class Usage:
    """One row of usage: a booking and the part of it held in the period."""

    booking: MeteredBooking
    held: Window

    @property
    def hours(self) -> Fraction:
        assert self.held.duration is not None, "held time always ends"
        return hours(self.booking.share, microseconds(self.held.duration))


def usage_of(booking: MeteredBooking, period: Window, now: datetime) -> Usage | None:
    """The usage `booking` yields in `period` (None: none)."""
    window = held(booking.span, period, now)
    return None if window is None else Usage(booking, window)


@dataclass(frozen=True, slots=True)
class HeldTotal:
    """Time held in a period, summed in the database over a tenant's bookings of one pool and one
    share (so that a million bookings reach Python as a few of these)."""

    tenant_id: str
    pool_id: str | None
    share: Fraction
    microseconds: int
    bookings: int

    @property
    def hours(self) -> Fraction:
        return hours(self.share, self.microseconds)


@dataclass(frozen=True, slots=True)
class HeldShape:
    """How often a pool's bookings took one size of piece of a GPU or node in a period: `times`
    holdings, each of `atoms` atoms of class `cls` at `share` of a GPU apiece, all on one GPU (a
    piece of one: MIG instances, slots) or, for whole GPUs, on one node, by one reservation or
    replica. The recorded request sizes the pool's fragmentation is measured against
    (`domain.placement.pool_fragmentation`)."""

    pool_id: str
    cls: str
    share: Fraction
    atoms: int
    times: int


def hours_by_meter(totals: Iterable[HeldTotal], meter_of: Mapping[str, str]) -> dict[str, Fraction]:
    """Exact GPU-hours per meter (`meter_of`: each pool's meter; a pool not in it is UNMETERED)."""
    out: dict[str, Fraction] = {}
    for total in totals:
        meter = meter_of.get(total.pool_id or "", UNMETERED)
        out[meter] = out.get(meter, Fraction(0)) + total.hours
    return out


CURSOR_PREFIX = "bkg-"
MAX_CURSOR_DIGITS = 18


def check_cursor(cursor: str) -> str:
    """A usage cursor is the id of the last booking of the previous page (`bkg-<n>`)."""
    digits = cursor.removeprefix(CURSOR_PREFIX)
    if digits == cursor or not digits.isascii() or not digits.isdigit() or len(digits) > MAX_CURSOR_DIGITS:
        raise InvalidInput(
            f"cursor {cursor[:40]!r} is not a booking id; pass the nextCursor of a previous page",
            {"field": "cursor"},
        )
    return cursor
