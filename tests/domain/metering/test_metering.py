"""Metering rules without a database: an atom's share of a GPU, the time a booking holds in a period,
exact hours and the one rounding."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.fleet.atoms import derive_gpu_atoms
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.fleet.pools import PoolSharing
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import (
    HeldTotal,
    check_cursor,
    held,
    hours,
    hours_by_meter,
    microseconds,
    shown,
)
from tests.builders import T0, at, atom, h100

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def slots(mode: str, replicas: int) -> list[Fraction]:
    """The shares of the slots of one H100 in a `mode` pool of `replicas`, as derivation makes them."""
    derived = derive_gpu_atoms(h100(), "n1", PoolSharing("p", mode, replicas), "H100-80GB")  # type: ignore[arg-type]
    return [share(a) for a in derived if a.cls == "gpu.slot"]


def test_a_whole_gpu_is_one() -> None:
    [whole] = derive_gpu_atoms(h100(), "n1", PoolSharing("p", "exclusive"), "H100-80GB")
    assert share(whole) == 1


def test_a_timeslice_slot_is_one_over_the_slots() -> None:
    assert slots("timeslice", 4) == [Fraction(1, 4)] * 4


def test_an_mps_slot_with_three_replicas_is_33_hundredths() -> None:
    assert slots("mps", 3) == [Fraction(33, 100)] * 3


def test_a_3g_40gb_on_an_h100_is_three_sevenths() -> None:
    gpu = h100(mig_mode_current=True, mig_instances=(MigInstance("3g.40gb", 1, 0, 0, 4, "MIG-a"),))
    parent, instance = derive_gpu_atoms(gpu, "n1", PoolSharing("p", "mig"), "H100-80GB")
    assert (share(parent), share(instance)) == (1, Fraction(3, 7))


def test_a_1g_on_an_rtx_pro_6000_is_one_quarter() -> None:
    gpu = GpuReport(
        uuid="GPU-rtx",
        product=RTX_PRO_6000,
        memory_mib=97_887,
        mig_mode_current=True,
        mig_instances=(MigInstance("1g.24gb", 3, 0, 0, 3, "MIG-r"),),
    )
    instance = derive_gpu_atoms(gpu, "n1", PoolSharing("p", "mig"), "RTX-PRO-6000")[1]
    assert instance.attributes["migProfile"] == "1g.24gb"
    assert share(instance) == Fraction(1, 4)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        pytest.param(
            {"gpuModel": "NO-SUCH-GPU", "migProfile": "2g.20gb"}, Fraction(2, 7), id="unknown model"
        ),
        pytest.param(
            {"gpuModel": "H100-80GB", "migProfile": "9g.99gb"}, Fraction(1), id="past the GPU: capped"
        ),
        pytest.param({"migProfile": "odd"}, Fraction(1), id="no compute count in the name"),
        pytest.param({}, Fraction(1), id="no profile at all"),
    ],
)
def test_a_mig_instance_the_catalog_cannot_size_is_read_from_its_name(
    attributes: dict[str, str], expected: Fraction
) -> None:
    assert share(atom("g", "mig:1.0", attributes=attributes)) == expected


def test_a_slot_without_its_count_bills_a_whole_gpu() -> None:
    assert share(atom("g", "slot:0", attributes={"sharing": "timeslice"})) == 1
    assert share(atom("g", "slot:0", attributes={"sharing": "mps", "slots": 2})) == Fraction(1, 2)


def test_the_seed_example_two_of_four_slots_and_a_3g_for_an_hour() -> None:
    hour = microseconds(timedelta(hours=1))
    total = 2 * hours(Fraction(1, 4), hour) + hours(Fraction(3, 7), hour)
    assert total == Fraction(13, 14)
    assert shown(total) == "0.928571"


MONTH = Window(T0.replace(day=1, hour=0), T0.replace(year=2027, month=1, day=1, hour=0))


def test_a_booking_holds_from_its_start_to_its_end_inside_the_period() -> None:
    assert held(Window(at(0), at(2)), MONTH, at(0)) == Window(at(0), at(2))
    # Cut at the period's edges, on either side.
    day = Window(at(-9), at(15))
    assert held(Window(at(-10), at(1)), day, at(0)) == Window(at(-9), at(1))
    assert held(Window(at(14), at(20)), day, at(0)) == Window(at(14), at(15))
    assert held(Window(at(15), at(16)), day, at(0)) is None
    assert held(Window(at(-12), at(-9)), day, at(0)) is None


def test_an_open_ended_booking_holds_up_to_now() -> None:
    assert held(Window(at(0)), MONTH, at(3)) == Window(at(0), at(3))
    assert held(Window(at(5)), MONTH, at(3)) is None


def test_hours_are_exact_and_shown_rounded_half_up() -> None:
    assert hours(Fraction(1), 1) == Fraction(1, 3_600_000_000)
    assert shown(Fraction(1, 2_000_000)) == "0.000001"
    assert shown(Fraction(1, 2_000_001)) == "0.000000"
    assert shown(Fraction(2, 3)) == "0.666667"
    assert shown(Fraction(7)) == "7.000000"


def test_hours_by_meter_sum_each_pools_totals_on_its_meter() -> None:
    totals = [
        HeldTotal("acme", "ts", Fraction(1, 4), 2 * 3_600_000_000, 2),
        HeldTotal("acme", "mig", Fraction(3, 7), 3_600_000_000, 1),
        HeldTotal("acme", "gone", Fraction(1), 3_600_000_000, 1),
    ]
    meters = {"ts": "gpu.h100.hours", "mig": "gpu.h100.hours"}
    assert hours_by_meter(totals, meters) == {"gpu.h100.hours": Fraction(13, 14), "gpu.hours": 1}


def test_a_cursor_is_a_booking_id() -> None:
    assert check_cursor("bkg-12") == "bkg-12"
    for bad in ("12", "bkg-", "bkg-x1", "bkg-" + "9" * 19, "bkg-١٢"):
        with pytest.raises(InvalidInput, match="is not a booking id"):
            check_cursor(bad)


instants = st.integers(min_value=-100_000, max_value=100_000).map(lambda s: T0 + timedelta(seconds=s))


@given(start=instants, length=st.integers(1, 50_000) | st.none(), a=instants, b=instants, now=instants)
def test_held_time_lies_in_the_booking_and_the_period(
    start: datetime, length: int | None, a: datetime, b: datetime, now: datetime
) -> None:
    if a == b:
        return
    period = Window(min(a, b), max(a, b))
    span = Window(start, None if length is None else start + timedelta(seconds=length))
    window = held(span, period, now)
    end = now if span.end is None else span.end
    if window is None:
        assert max(span.start, period.start) >= min(end, period.end or end)
        return
    assert period.start <= window.start and window.end is not None and window.end <= (period.end or end)
    assert span.start <= window.start and window.end <= end
