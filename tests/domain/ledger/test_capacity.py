"""What is free, and when: an atom's availability at an instant, and a pool's free capacity per kind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window, window_asked
from better_compute.domain.ledger.capacity import MAX_FREE_COUNT, check_count, free_by_kind
from better_compute.domain.ledger.ledger import availability
from tests.builders import T0, at, atom


def test_an_atom_with_no_booking_now_is_free_now_even_if_booked_later() -> None:
    later = Window(at(2), at(3))
    assert availability([later], T0).booked_now is False
    assert availability([later], T0).next_free_at == T0


def test_back_to_back_bookings_free_the_atom_only_at_the_end_of_the_chain() -> None:
    chain = [Window(at(1), at(3)), Window(at(-1), at(1)), Window(at(4), at(5))]
    free = availability(chain, T0)
    assert free.booked_now is True
    assert free.next_free_at == at(3)  # the gap from 3 to 4 is where it is next free


def test_an_open_ended_booking_never_frees() -> None:
    free = availability([Window(at(-1), at(1)), Window(at(1))], T0)
    assert free.booked_now is True and free.next_free_at is None


def test_a_booking_ending_exactly_now_leaves_the_atom_free() -> None:
    assert availability([Window(at(-1), T0)], T0).booked_now is False


@given(
    st.lists(
        st.tuples(st.integers(-10, 10), st.integers(1, 6)).map(lambda p: Window(at(p[0]), at(p[0] + p[1]))),
        max_size=6,
    )
)
def test_next_free_is_the_first_instant_no_booking_covers(spans: list[Window]) -> None:
    free = availability(spans, T0)
    assert free.booked_now == any(s.contains(T0) for s in spans)
    assert free.next_free_at is not None and free.next_free_at >= T0
    assert not any(s.contains(free.next_free_at) for s in spans)
    # Every hour mark between now and then is booked (the spans start and end on hour marks).
    hour = T0
    while hour < free.next_free_at:
        assert any(s.contains(hour) for s in spans)
        hour += timedelta(hours=1)


def _mig(gpu: str, gi: int, profile: str, **kw: object) -> object:
    return atom(gpu, f"mig:{gi}.0", attributes={"migProfile": profile, "gpuModel": "H100-80GB"}, **kw)  # type: ignore[arg-type]


def test_free_capacity_is_counted_per_kind_with_the_earliest_start_for_the_count() -> None:
    atoms = [
        _mig("g1", 1, "3g.40gb"),
        _mig("g1", 2, "3g.40gb"),
        _mig("g1", 3, "1g.10gb"),
        _mig("g2", 1, "3g.40gb", bookable=False),  # a GPU changing layout: not counted
        atom("g3", "gpu", attributes={"gpuModel": "A100-80GB"}),
    ]
    busy = {"g1/mig:1.0": [Window(at(-1), at(2))], "g1/mig:2.0": [Window(at(0.5), at(5))]}
    window = Window(T0, at(1))
    kinds = free_by_kind(atoms, busy, window)  # type: ignore[arg-type]
    shown = [(k.cls, k.gpu_model, k.mig_profile, k.atoms, k.free, k.earliest_start) for k in kinds]
    assert shown == [
        ("gpu", "A100-80GB", None, 1, 1, T0),
        ("gpu.mig", "H100-80GB", "3g.40gb", 2, 0, at(2)),
        ("gpu.mig", "H100-80GB", "1g.10gb", 1, 1, T0),
    ]
    two = {k.mig_profile: k.earliest_start for k in free_by_kind(atoms, busy, window, count=2)}  # type: ignore[arg-type]
    assert two["3g.40gb"] == at(5)  # both free for an hour together only once the second ends
    assert two["1g.10gb"] is None  # the pool has one such atom: never two


def test_a_kind_held_open_ended_is_never_free() -> None:
    atoms = [_mig("g1", 1, "3g.40gb")]
    kinds = free_by_kind(atoms, {"g1/mig:1.0": [Window(at(-1))]}, Window(T0, at(1)))  # type: ignore[arg-type]
    assert (kinds[0].free, kinds[0].earliest_start) == (0, None)


def test_the_window_defaults_to_the_next_hour_and_refuses_an_end_before_its_start() -> None:
    assert window_asked(None, None, T0) == Window(T0, at(1))
    assert window_asked(at(2), None, T0) == Window(at(2), at(3))
    with pytest.raises(InvalidInput, match=r"^to \(.*\) must be after from") as refused:
        window_asked(at(2), at(2), T0)
    assert refused.value.details["field"] == "to"
    with pytest.raises(InvalidInput, match="from must carry a timezone"):
        window_asked(at(2).replace(tzinfo=None), None, T0)


@pytest.mark.parametrize("count", [0, -1, MAX_FREE_COUNT + 1, True, "2"])
def test_a_count_out_of_range_is_refused(count: object) -> None:
    with pytest.raises(InvalidInput, match=f"count must be an integer from 1 to {MAX_FREE_COUNT}"):
        check_count(count)
