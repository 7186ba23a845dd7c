"""Capacity accounting: every GPU-hour in exactly one state, the states summing to capacity exactly."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.fleet.gpu_states import GpuPeriod, GpuState
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import (
    MAX_BUCKETS,
    STATES,
    Grid,
    Held,
    StateHours,
    account,
    grid_of,
)
from tests.builders import T0, at

THREE_G = Fraction(3, 7)


def state(
    gpu: str = "g1",
    *,
    healthy: bool = True,
    cordoned: bool = False,
    shares: dict[str, Fraction] | None = None,
    pool: str | None = "p",
) -> GpuState:
    return GpuState(gpu, "n1", pool, healthy, cordoned, tuple(sorted((shares or {}).items())))


def period(s: GpuState, start: float, end: float | None = None) -> GpuPeriod:
    return GpuPeriod(s, Window(at(start), None if end is None else at(end)))


def held(atom_id: str, start: float, end: float | None, gpu: str = "g1", *, changing: bool = False) -> Held:
    return Held(gpu, atom_id, Window(at(start), None if end is None else at(end)), changing)


def hours(**states: Fraction | int) -> StateHours:
    return StateHours(**{k: Fraction(v) for k, v in states.items()})


MIG_GPU = state(shares={"g1/gpu": Fraction(1), "g1/3g": THREE_G, "g1/2g-a": Fraction(2, 7)})


def test_a_half_booked_mig_gpu_is_three_sevenths_booked_and_four_sevenths_free() -> None:
    grid = grid_of(T0, at(2), "1h")
    first, second = account([period(MIG_GPU, -5)], [held("g1/3g", 0, 1)], grid)
    assert first == hours(booked=THREE_G, free=Fraction(4, 7))
    assert first.capacity == 1
    assert second == hours(free=1)


def test_a_partition_change_holds_the_whole_gpu_as_changing_whatever_else_is_true() -> None:
    sick = state(healthy=False, cordoned=True, shares={"g1/gpu": Fraction(1), "g1/3g": THREE_G})
    bookings = [held("g1/gpu", 0, 1, changing=True), held("g1/3g", 0, 1, changing=True)]
    (only,) = account([period(sick, 0)], bookings, grid_of(T0, at(1), "1h"))
    assert only == hours(changing=1)


def test_an_unhealthy_gpus_unbooked_part_is_unhealthy_and_a_cordoned_ones_cordoned() -> None:
    sick = state(healthy=False, shares=dict(MIG_GPU.shares))
    fenced = state("g2", cordoned=True, shares={"g2/gpu": Fraction(1)})
    (only,) = account([period(sick, 0), period(fenced, 0)], [held("g1/3g", 0, 1)], grid_of(T0, at(1), "1h"))
    assert only == hours(booked=THREE_G, unhealthy=Fraction(4, 7), cordoned=1)


def test_unhealthy_takes_precedence_over_cordoned() -> None:
    both = state(healthy=False, cordoned=True, shares={"g1/gpu": Fraction(1)})
    (only,) = account([period(both, 0)], [], grid_of(T0, at(1), "1h"))
    assert only == hours(unhealthy=1)


def test_a_gpu_counts_only_while_its_period_holds() -> None:
    """Joined the pool at 0:30, gone at 1:15: three quarters of an hour of capacity, then half."""
    grid = grid_of(T0, at(2), "1h")
    first, second = account([period(MIG_GPU, 0.5, 1.25)], [held("g1/3g", 0, None)], grid)
    assert first == hours(booked=THREE_G / 2, free=Fraction(4, 7) / 2)
    assert second == hours(booked=THREE_G / 4, free=Fraction(4, 7) / 4)


def test_a_booking_counts_at_the_share_of_the_period_it_is_held_in() -> None:
    """A slot was a quarter of its GPU, then (fewer replicas) a half."""
    quarter = state(shares={"g1/slot:0": Fraction(1, 4)})
    half = state(shares={"g1/slot:0": Fraction(1, 2)})
    (only,) = account(
        [period(quarter, 0, 0.5), period(half, 0.5)], [held("g1/slot:0", 0, 1)], grid_of(T0, at(1), "1h")
    )
    assert only == hours(booked=Fraction(3, 8), free=Fraction(5, 8))


def test_bookings_beyond_the_gpu_count_it_once() -> None:
    """A node that split a GPU under a whole-GPU booking: the GPU is booked, never more."""
    (only,) = account(
        [period(MIG_GPU, 0)], [held("g1/gpu", 0, 1), held("g1/3g", 0, 1)], grid_of(T0, at(1), "1h")
    )
    assert only == hours(booked=1)


def test_bookings_of_gpus_without_a_period_and_of_unknown_atoms_count_nothing() -> None:
    (only,) = account(
        [period(MIG_GPU, 0)],
        [held("g9/gpu", 0, 1, gpu="g9"), held("g1/gone", 0, 1)],
        grid_of(T0, at(1), "1h"),
    )
    assert only == hours(free=1)


def test_the_last_bucket_stops_at_the_end_of_the_range() -> None:
    grid = grid_of(T0, at(2.5), "1h")
    assert [b.duration for b in grid.buckets()] == [
        timedelta(hours=1),
        timedelta(hours=1),
        timedelta(minutes=30),
    ]
    assert [b.capacity for b in account([period(MIG_GPU, 0)], [], grid)] == [1, 1, Fraction(1, 2)]


@pytest.mark.parametrize(
    ("start", "end", "bucket", "field"),
    [
        pytest.param(at(1), at(1), "1h", "to", id="from equal to to"),
        pytest.param(at(2), at(1), "1h", "to", id="from after to"),
        pytest.param(at(0), at(1), "soon", "bucket", id="a bucket that is not a duration"),
        pytest.param(at(0), at(1), "-1h", "bucket", id="a negative bucket"),
        pytest.param(at(0), at(1), "PT0.0000001S", "bucket", id="a bucket under a microsecond"),
        pytest.param(at(0), at(24 * 42), "1h", "bucket", id="too many buckets"),
        pytest.param(T0.replace(tzinfo=None), at(1), "1h", "from", id="a from without a zone"),
    ],
)
def test_a_bad_range_or_bucket_is_invalid_input_naming_the_field(
    start: datetime, end: datetime, bucket: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        grid_of(start, end, bucket)
    assert refused.value.details["field"] == field


def test_a_month_in_hours_fits_and_the_limit_is_exact() -> None:
    assert len(grid_of(T0, at(24 * 31), "1h").buckets()) == 744
    assert len(grid_of(T0, at(MAX_BUCKETS), "1h").buckets()) == MAX_BUCKETS
    with pytest.raises(InvalidInput):
        grid_of(T0, at(MAX_BUCKETS + 0.5), "1h")
    assert grid_of(T0, at(1), None).bucket == "1h"


# The property: against a plain reference, on random histories and bookings.

SHARES = (Fraction(1), Fraction(1, 4), Fraction(1, 7), Fraction(3, 7), Fraction(33, 100), Fraction(1, 2))
ATOMS = ("a0", "a1", "a2", "a3")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[GpuPeriod], list[Held], Grid]:
    minutes = st.integers(min_value=-60, max_value=300)
    periods: list[GpuPeriod] = []
    bookings: list[Held] = []
    for g in range(draw(st.integers(min_value=1, max_value=3))):
        gpu = f"g{g}"
        cuts = sorted(set(draw(st.lists(minutes, min_size=1, max_size=5))))
        ends: list[float | None] = [c / 60 for c in cuts[1:]]
        ends.append(None if draw(st.booleans()) else (cuts[-1] + draw(st.integers(1, 120))) / 60)
        for start, end in zip(cuts, ends, strict=True):
            if draw(st.booleans()) or not periods:  # a gap is a GPU gone for a while
                shares = {a: draw(st.sampled_from(SHARES)) for a in draw(st.sets(st.sampled_from(ATOMS)))}
                s = state(gpu, healthy=draw(st.booleans()), cordoned=draw(st.booleans()), shares=shares)
                periods.append(period(s, start / 60, end))
        for _ in range(draw(st.integers(min_value=0, max_value=6))):
            start = draw(minutes)
            end = None if draw(st.integers(0, 5)) == 0 else start + draw(st.integers(1, 200))
            bookings.append(
                held(
                    draw(st.sampled_from(ATOMS)),
                    start / 60,
                    None if end is None else end / 60,
                    gpu,
                    changing=draw(st.integers(0, 6)) == 0,
                )
            )
    start, length = draw(st.integers(-30, 120)), draw(st.integers(1, 400))
    bucket = draw(st.sampled_from(["7m", "30m", "1h", "90m"]))
    return periods, bookings, grid_of(at(start / 60), at((start + length) / 60), bucket)


def reference(periods: list[GpuPeriod], bookings: list[Held], grid: Grid) -> list[StateHours]:
    """The split of each GPU decided afresh on every stretch between two instants anything changes."""
    out = []
    for bucket in grid.buckets():
        assert bucket.end is not None
        total = dict.fromkeys(STATES, Fraction(0))
        instants = {bucket.start, bucket.end}
        for p in periods:
            instants |= {p.span.start, p.span.end or bucket.end}
        for b in bookings:
            instants |= {b.span.start, b.span.end or bucket.end}
        cuts = sorted(t for t in instants if bucket.start <= t <= bucket.end)
        for lo, hi in pairwise(cuts):
            length = _hours_of(lo, hi)
            for gpu in {p.state.gpu_id for p in periods}:
                live = [p for p in periods if p.state.gpu_id == gpu and p.span.contains(lo)]
                if not live:
                    continue
                s = live[0].state
                on = [b for b in bookings if b.gpu_id == gpu and b.span.contains(lo)]
                if any(b.changing for b in on):
                    total["changing"] += length
                    continue
                booked = min(
                    Fraction(1), sum((s.share_of().get(b.atom_id, Fraction(0)) for b in on), Fraction(0))
                )
                rest = "unhealthy" if not s.healthy else "cordoned" if s.cordoned else "free"
                total["booked"] += booked * length
                total[rest] += (1 - booked) * length
        out.append(StateHours(**total))
    return out


def _hours_of(lo: datetime, hi: datetime) -> Fraction:
    return Fraction(max(hi - lo, timedelta(0)) // timedelta(microseconds=1), 3_600_000_000)


@given(histories())
def test_every_gpu_hour_is_in_exactly_one_state_as_the_reference_says(
    case: tuple[list[GpuPeriod], list[Held], Grid],
) -> None:
    periods, bookings, grid = case
    answer = account(periods, bookings, grid)
    assert answer == reference(periods, bookings, grid)
    for bucket, got in zip(grid.buckets(), answer, strict=True):
        assert bucket.end is not None
        capacity = sum(
            (
                _hours_of(max(p.span.start, bucket.start), min(p.span.end or bucket.end, bucket.end))
                for p in periods
            ),
            Fraction(0),
        )
        assert got.capacity == capacity
        assert sum(got.by_state().values(), Fraction(0)) == capacity


def test_a_range_at_the_end_of_the_calendar_has_buckets_that_stay_inside_it() -> None:
    end = datetime.max.replace(tzinfo=T0.tzinfo)
    grid = grid_of(end - timedelta(days=2), end, "1w")
    assert grid.buckets() == [Window(end - timedelta(days=2), end)]
