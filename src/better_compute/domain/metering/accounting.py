"""Capacity accounting: every GPU-hour of a range in exactly one state, so the states sum to capacity.

A GPU's capacity is its hours in the pool (while present: `domain.fleet.gpu_states`). At every instant the
whole GPU is split between the states, by this precedence (docs/capacity.md#accounting):

1. `changing`: a partition change holds the GPU (it books the whole family), so all of it;
2. `booked`: otherwise the shares of its booked atoms (`domain.fleet.shares.share`), at most the GPU;
3. the rest: `unhealthy` when the GPU is, else `cordoned` when its node is, else `free`.

Shares are fractions of a GPU and times are microseconds, so the sweep counts in whole units of
`unit` (the least common denominator of every share in play) times microseconds: integers, added
exactly, turned into `Fraction` hours once at the end. One pass over the periods and bookings,
then one over the buckets; nothing is read per bucket.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from fractions import Fraction

from better_compute.domain.fleet.gpu_states import GpuPeriod
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window, parse_duration, require_aware

MAX_BUCKETS = 1000
"""The most buckets one answer holds: a month in hours (744) fits, a year in hours does not
(ask for days). It bounds the answer's size and the sweep's work per question."""

DEFAULT_BUCKET = "1h"

MICROSECONDS_PER_HOUR = 3_600_000_000
_MICROSECOND = timedelta(microseconds=1)

STATES = ("booked", "free", "changing", "unhealthy", "cordoned")
"""Every state a GPU-hour can be in, in the order answers list them."""

_BOOKED, _FREE, _CHANGING, _UNHEALTHY, _CORDONED = range(len(STATES))


@dataclass(frozen=True, slots=True)
class Grid:
    """A bounded range cut into buckets of `size` from its start; the last may be shorter."""

    window: Window
    size: timedelta
    bucket: str
    """The bucket as asked (`1h`), for the answer."""

    @property
    def start(self) -> datetime:
        return self.window.start

    @property
    def end(self) -> datetime:
        assert self.window.end is not None, "a grid is bounded"
        return self.window.end

    @property
    def length_us(self) -> int:
        return (self.end - self.start) // _MICROSECOND

    @property
    def size_us(self) -> int:
        return self.size // _MICROSECOND

    def buckets(self) -> list[Window]:
        """The buckets, in order."""
        count = -(-self.length_us // self.size_us)
        # The last one ends at `end`, not a bucket later: that could be past the year 9999.
        starts = [self.start + i * self.size for i in range(count)]
        return [Window(s, e) for s, e in zip(starts, [*starts[1:], self.end], strict=True)]


def grid_of(start: datetime, end: datetime, bucket: str | None) -> Grid:
    """The grid a question asks for: `from` before `to`, both with a zone, and a bucket
    (`domain.kernel.timewin.parse_duration`, default 1h) that cuts the range into at most MAX_BUCKETS;
    anything else is INVALID_INPUT naming the field."""
    begin, finish = require_aware(start, "from"), require_aware(end, "to")
    if finish <= begin:
        raise InvalidInput(
            f"to ({finish.isoformat()}) must be after from ({begin.isoformat()})",
            {"field": "to", "from": begin.isoformat(), "to": finish.isoformat()},
        )
    text = DEFAULT_BUCKET if bucket is None else bucket
    size = parse_duration(text, "bucket")
    size_us = size // _MICROSECOND
    if size_us < 1:
        raise InvalidInput(f"bucket {text!r} is shorter than a microsecond", {"field": "bucket"})
    count = -(-((finish - begin) // _MICROSECOND) // size_us)
    if count > MAX_BUCKETS:
        raise InvalidInput(
            f"from {begin.isoformat()} to {finish.isoformat()} in buckets of {text} is {count} buckets;"
            f" at most {MAX_BUCKETS} per answer: ask for a larger bucket or a shorter range",
            {"field": "bucket", "buckets": count, "max": MAX_BUCKETS},
        )
    return Grid(Window(begin, finish), size, text)


@dataclass(frozen=True, slots=True)
class Held:
    """A live booking as accounting reads it: its GPU and atom, its window, and whether it is a
    partition change's."""

    gpu_id: str
    atom_id: str
    span: Window
    changing: bool


@dataclass(frozen=True, slots=True)
class StateHours:
    """GPU-hours per state, exactly; `capacity` is their sum."""

    booked: Fraction = Fraction(0)
    free: Fraction = Fraction(0)
    changing: Fraction = Fraction(0)
    unhealthy: Fraction = Fraction(0)
    cordoned: Fraction = Fraction(0)

    @property
    def capacity(self) -> Fraction:
        return self.booked + self.free + self.changing + self.unhealthy + self.cordoned

    def by_state(self) -> dict[str, Fraction]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __add__(self, other: StateHours) -> StateHours:
        return StateHours(*(getattr(self, s) + getattr(other, s) for s in STATES))


Vector = tuple[int, int, int, int, int]
_ZERO: Vector = (0, 0, 0, 0, 0)


def account(periods: Iterable[GpuPeriod], held: Iterable[Held], grid: Grid) -> list[StateHours]:
    """Each bucket of `grid`'s GPU-hours by state, over the GPUs of `periods` while each period
    holds; `held` are the live bookings of those GPUs (others are ignored)."""
    length = grid.length_us
    spans: dict[str, list[tuple[int, int, GpuPeriod]]] = defaultdict(list)
    for period in periods:
        clipped = _clip(period.span, grid)
        if clipped is not None:
            spans[period.state.gpu_id].append((*clipped, period))
    holds: dict[str, list[tuple[int, int, str, bool]]] = defaultdict(list)
    for booking in held:
        if booking.gpu_id in spans and (clipped := _clip(booking.span, grid)) is not None:
            holds[booking.gpu_id].append((*clipped, booking.atom_id, booking.changing))
    unit = math.lcm(1, *(s.denominator for ps in spans.values() for *_, p in ps for _, s in p.state.shares))
    deltas: list[tuple[int, Vector]] = []
    for gpu_id, gpu_spans in spans.items():
        deltas.extend(_gpu_deltas(gpu_spans, holds.get(gpu_id, []), unit))
    sums = _integrate(deltas, length, grid.size_us)
    per_hour = unit * MICROSECONDS_PER_HOUR
    return [StateHours(*(Fraction(v, per_hour) for v in row)) for row in sums]


def _clip(span: Window, grid: Grid) -> tuple[int, int] | None:
    """`span` inside the grid, as microseconds from its start; None when they do not meet."""
    start = max(span.start, grid.start)
    end = grid.end if span.end is None else min(span.end, grid.end)
    if start >= end:
        return None
    return (start - grid.start) // _MICROSECOND, (end - grid.start) // _MICROSECOND


def _vector(period: GpuPeriod | None, changing: int, booked: int, unit: int) -> Vector:
    """One GPU's split between the states at an instant, in units of 1/unit of the GPU."""
    out = [0] * len(STATES)
    if period is None:
        pass
    elif changing:
        out[_CHANGING] = unit
    else:
        part = min(unit, booked)
        state = period.state
        out[_BOOKED] = part
        out[_UNHEALTHY if not state.healthy else _CORDONED if state.cordoned else _FREE] += unit - part
    return (out[0], out[1], out[2], out[3], out[4])


def _gpu_deltas(
    spans: Sequence[tuple[int, int, GpuPeriod]], holds: Sequence[tuple[int, int, str, bool]], unit: int
) -> list[tuple[int, Vector]]:
    """How one GPU's split changes over the grid: (time, change) at each instant it does."""
    # (time, ends before starts, kind, index): kind 0 a period, 1 a booking.
    events: list[tuple[int, int, int, int]] = []
    for i, (start, end, _) in enumerate(spans):
        events += [(start, 1, 0, i), (end, 0, 0, i)]
    for j, (start, end, _, _) in enumerate(holds):
        events += [(start, 1, 1, j), (end, 0, 1, j)]
    events.sort()
    live_periods: set[int] = set()
    live_holds: set[int] = set()
    shares: dict[str, int] = {}
    period: GpuPeriod | None = None
    changing = booked = 0
    previous = _ZERO
    out: list[tuple[int, Vector]] = []
    k = 0
    while k < len(events):
        at = events[k][0]
        period_moved = False
        started: list[int] = []
        ended: list[int] = []
        while k < len(events) and events[k][0] == at:
            _, starts, kind, index = events[k]
            if kind == 0:
                (live_periods.add if starts else live_periods.discard)(index)
                period_moved = True
            elif starts:
                live_holds.add(index)
                started.append(index)
            else:
                live_holds.discard(index)
                ended.append(index)
            k += 1
        if period_moved:
            # Periods of one GPU do not overlap; were two written to, the later one holds.
            newest = max(live_periods, key=lambda i: spans[i][0], default=None)
            period = None if newest is None else spans[newest][2]
            shares = {} if period is None else _units(period, unit)
            booked = sum(shares.get(holds[j][2], 0) for j in live_holds if not holds[j][3])
        else:
            booked += sum(shares.get(holds[j][2], 0) for j in started if not holds[j][3])
            booked -= sum(shares.get(holds[j][2], 0) for j in ended if not holds[j][3])
        changing += sum(1 for j in started if holds[j][3]) - sum(1 for j in ended if holds[j][3])
        vector = _vector(period, changing, booked, unit)
        if vector != previous:
            out.append((at, _minus(vector, previous)))
            previous = vector
    return out


def _units(period: GpuPeriod, unit: int) -> dict[str, int]:
    return {atom_id: s.numerator * (unit // s.denominator) for atom_id, s in period.state.shares}


def _minus(a: Vector, b: Vector) -> Vector:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4])


def _integrate(deltas: list[tuple[int, Vector]], length: int, size: int) -> list[list[int]]:
    """Per bucket, the integral of the summed split over time: one pass over the changes in time
    order, each stretch between two changes spread over the buckets it crosses."""
    count = -(-length // size)
    sums = [[0] * len(STATES) for _ in range(count)]
    rate = [0] * len(STATES)
    at = 0
    deltas.sort(key=lambda d: d[0])
    for when, delta in deltas:
        if when > at and any(rate):
            _spread(sums, rate, at, when, size)
        at = max(at, when)
        for s in range(len(STATES)):
            rate[s] += delta[s]
    assert not any(rate), "every period ends inside the grid"
    return sums


def _spread(sums: list[list[int]], rate: list[int], start: int, end: int, size: int) -> None:
    while start < end:
        bucket = start // size
        edge = min(end, (bucket + 1) * size)
        width = edge - start
        row = sums[bucket]
        for s in range(len(STATES)):
            row[s] += rate[s] * width
        start = edge
