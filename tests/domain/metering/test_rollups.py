"""Rollups: whole GPUs per model, atoms per pool and class, whole GPUs booked over time."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

from better_compute.domain.fleet.pools import SharingMode
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import grid_of
from better_compute.domain.metering.rollups import ClassCount, ModelCount, by_pool, summary, timeline
from tests.builders import T0, at, atom


def gpu(gpu_id: str, model: str | None = "H100-80GB", *, healthy: bool = True, present: bool = True) -> Gpu:
    return Gpu(
        gpu_id,
        "n1",
        0,
        "NVIDIA Mystery",
        model,
        1024,
        0,
        (),
        healthy,
        present,
        False,
        False,
        (),
        datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_summary_counts_whole_gpus_per_model() -> None:
    gpus = [
        gpu("g1"),
        gpu("g2"),
        gpu("g3", healthy=False),
        gpu("g4"),
        gpu("g5", None),
        gpu("g6", present=False),
    ]
    atoms = [
        atom("g1"),
        atom("g2"),
        atom("g3", bookable=False),
        atom("g4", bookable=False),  # split: its parent is not bookable
        atom("g4", "mig:1.0"),
        atom("g5"),
    ]
    assert summary(gpus, atoms, {"g2/gpu", "g4/mig:1.0"}) == [
        ModelCount("H100-80GB", total=4, bookable=2, booked=1, unhealthy=1),
        ModelCount("NVIDIA Mystery", total=1, bookable=1, booked=0, unhealthy=0),
    ]


def test_by_pool_shows_only_the_classes_a_pool_can_have_even_when_empty() -> None:
    atoms = [
        atom("g1", bookable=False),
        atom("g1", "mig:1.0"),
        atom("g1", "mig:2.0"),
        atom("g2", pool_id="other"),
        atom("g3", pool_id=None),
    ]
    pools: dict[str, SharingMode] = {"p": "mig", "x": "exclusive", "s": "timeslice"}
    assert by_pool(pools, atoms, {"g1/mig:2.0"}) == [
        ClassCount("p", "gpu", 1, 0, 0),
        ClassCount("p", "gpu.mig", 2, 2, 1),
        ClassCount("s", "gpu", 0, 0, 0),
        ClassCount("s", "gpu.slot", 0, 0, 0),
        ClassCount("x", "gpu", 0, 0, 0),
    ]


def test_by_pool_counts_a_class_the_mode_does_not_give_where_the_pool_holds_it() -> None:
    # a GPU whose MIG mode is on gives MIG instances in any pool: they are counted, never hidden
    atoms = [atom("g1", pool_id="x", bookable=False), atom("g1", "mig:1.0", pool_id="x")]
    assert by_pool({"x": "exclusive"}, atoms, set()) == [
        ClassCount("x", "gpu", 1, 0, 0),
        ClassCount("x", "gpu.mig", 1, 1, 0),
    ]


def test_timeline_says_the_most_whole_gpus_booked_at_once_and_their_hours() -> None:
    held = [
        Window(at(0), at(1)),
        Window(at(1), at(2)),  # back to back with the first: one GPU at a time
        Window(at(0.5), at(1.5)),
        Window(at(1.75), None),
    ]
    first, second, third = timeline(held, grid_of(T0, at(3), "1h"))
    assert (first.peak, first.hours) == (2, Fraction(3, 2))
    assert (second.peak, second.hours) == (2, Fraction(7, 4))
    assert (third.peak, third.hours) == (1, Fraction(1))
    assert third.span == Window(at(2), at(3))
