"""Quota per (tenant, pool, class): owner default, explicit rows, counting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import InvalidInput, QuotaExceeded
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.tenancy.quota import check_quota, effective_limit, in_use, parse_quota_limits

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def h(n: int) -> datetime:
    return T0 + timedelta(hours=n)


def test_owner_whole_gpus_are_unlimited_without_a_row() -> None:
    check_quota("acme", "acme", {}, {"gpu": 1000}, {"gpu": 64}, pool_id="p1")
    assert effective_limit("gpu", "acme", "acme", {}) is None


def test_an_owner_row_limits_whole_gpus() -> None:
    check_quota("acme", "acme", {"gpu": 4}, {"gpu": 2}, {"gpu": 2}, pool_id="p1")
    with pytest.raises(QuotaExceeded) as err:
        check_quota("acme", "acme", {"gpu": 4}, {"gpu": 3}, {"gpu": 2}, pool_id="p1")
    assert err.value.message == "quota exceeded for gpu in pool p1: 3 in use + 2 requested > limit 4"


@pytest.mark.parametrize("cls", ["gpu.mig", "gpu.slot"])
def test_fractions_need_a_row_even_for_the_owner(cls: str) -> None:
    with pytest.raises(QuotaExceeded) as err:
        check_quota("acme", "acme", {}, {}, {cls: 1}, pool_id="p1")
    assert err.value.message.startswith(f"no {cls} quota in pool p1")
    assert err.value.details == {
        "class": cls,
        "limit": None,
        "inUse": 0,
        "requested": 1,
        "tenantId": "acme",
        "poolId": "p1",
    }
    with pytest.raises(QuotaExceeded, match=f"no {cls} quota"):
        check_quota("acme", "acme", {"gpu": 8}, {}, {cls: 1}, pool_id="p1")
    check_quota("acme", "acme", {cls: 2}, {}, {cls: 2}, pool_id="p1")


def test_the_mig_message_and_details() -> None:
    with pytest.raises(QuotaExceeded) as err:
        check_quota("globex", "acme", {"gpu.mig": 2}, {"gpu.mig": 1}, {"gpu.mig": 2}, pool_id="p1")
    assert err.value.code == "QUOTA_EXCEEDED"
    assert err.value.message == "quota exceeded for gpu.mig in pool p1: 1 in use + 2 requested > limit 2"
    assert err.value.details["class"] == "gpu.mig"
    assert err.value.details["limit"] == 2
    assert err.value.details["inUse"] == 1
    assert err.value.details["requested"] == 2


def test_a_stranger_without_rows_is_quota_exceeded_not_forbidden() -> None:
    with pytest.raises(QuotaExceeded, match="tenant globex has no quota in pool p1"):
        check_quota("globex", "acme", {}, {}, {"gpu": 1}, pool_id="p1")


def test_a_stranger_needs_a_row_per_class() -> None:
    check_quota("globex", "acme", {"gpu.mig": 4}, {}, {"gpu.mig": 4}, pool_id="p1")
    with pytest.raises(QuotaExceeded, match="no gpu quota in pool p1 for tenant globex"):
        check_quota("globex", "acme", {"gpu.mig": 4}, {}, {"gpu": 1, "gpu.mig": 1}, pool_id="p1")


def test_classes_do_not_spend_each_other() -> None:
    check_quota(
        "acme", "acme", {"gpu": 1, "gpu.mig": 7}, {"gpu": 1, "gpu.slot": 9}, {"gpu.mig": 7}, pool_id="p"
    )


def test_a_zero_row_allows_nothing() -> None:
    with pytest.raises(QuotaExceeded, match="limit 0"):
        check_quota("acme", "acme", {"gpu": 0}, {}, {"gpu": 1}, pool_id="p1")


def test_nothing_requested_passes() -> None:
    check_quota("globex", "acme", {}, {}, {}, pool_id="p1")
    check_quota("globex", "acme", {}, {}, {"gpu": 0})


def test_the_pool_is_optional_in_the_message() -> None:
    with pytest.raises(QuotaExceeded) as err:
        check_quota("a", "a", {"gpu.slot": 1}, {"gpu.slot": 1}, {"gpu.slot": 1})
    assert err.value.message == "quota exceeded for gpu.slot: 1 in use + 1 requested > limit 1"


@given(st.integers(0, 20), st.integers(0, 20), st.integers(1, 20))
def test_the_limit_is_held_exactly(limit: int, held: int, wanted: int) -> None:
    args: tuple[Any, ...] = ("t", "o", {"gpu.mig": limit}, {"gpu.mig": held}, {"gpu.mig": wanted})
    if held + wanted <= limit:
        check_quota(*args)
    else:
        with pytest.raises(QuotaExceeded):
            check_quota(*args)


def test_in_use_counts_the_peak_of_bookings_overlapping_the_window_per_class() -> None:
    window = Window(h(2), h(4))
    bookings = [
        ("gpu.mig", Window(h(0), h(3))),
        ("gpu.mig", Window(h(3), h(5))),
        ("gpu.mig", Window(h(3), h(6))),
        ("gpu.mig", Window(h(0), h(2))),
        ("gpu.mig", Window(h(4), h(6))),
        ("gpu", Window(h(1), None)),
        ("gpu.slot", Window(h(5), None)),
    ]
    assert in_use(bookings, window) == {"gpu.mig": 2, "gpu": 1}


def test_quota_counts_peak_concurrent_holding_not_every_booking_in_the_window() -> None:
    """Issue 11, defect 18: two back-to-back bookings and a third that overlaps both are held at most
    two at once, so a limit of 2 admits the third."""
    held = in_use([("gpu", Window(h(0), h(2))), ("gpu", Window(h(2), h(4)))], Window(h(1), h(3)))
    assert held == {"gpu": 1}
    check_quota("globex", "acme", {"gpu": 2}, held, {"gpu": 1}, pool_id="p1")
    with pytest.raises(QuotaExceeded):
        check_quota("globex", "acme", {"gpu": 2}, held, {"gpu": 2}, pool_id="p1")


_spans = st.tuples(st.integers(0, 12), st.integers(1, 6), st.booleans())


@given(st.lists(_spans, max_size=8), _spans)
def test_in_use_is_the_most_bookings_live_at_any_instant_of_the_window(
    spans: list[tuple[int, int, bool]], wanted: tuple[int, int, bool]
) -> None:
    def window(span: tuple[int, int, bool]) -> Window:
        start, length, open_ended = span
        return Window(h(start), None if open_ended else h(start + length))

    booked = [window(s) for s in spans]
    asked = window(wanted)
    # Every booking is constant between whole hours, so sampling each hour of the window is exact.
    last = asked.end or h(20)
    instants = [h(n) for n in range(21) if asked.start <= h(n) < last]
    peak = max((sum(1 for b in booked if b.contains(t)) for t in instants), default=0)
    assert in_use([("gpu", b) for b in booked], asked).get("gpu", 0) == peak


def test_parse_quota_limits() -> None:
    assert parse_quota_limits({"gpu": 8, "gpu.mig": 14, "gpu.slot": 0}) == {
        "gpu": 8,
        "gpu.mig": 14,
        "gpu.slot": 0,
    }
    assert parse_quota_limits({}) == {}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param({"tpu": 1}, "quota.tpu", id="a class that is no atom class"),
        pytest.param({"gpu": -1}, "quota.gpu", id="a negative limit"),
        pytest.param({"gpu.mig": 1.5}, "quota.gpu.mig", id="a fraction of a limit"),
        pytest.param({"gpu": True}, "quota.gpu", id="a boolean for a number"),
        pytest.param({"gpu": None}, "quota.gpu", id="a class without a limit"),
        pytest.param([1], "quota", id="a list instead of a mapping"),
    ],
)
def test_parse_quota_limits_refuses(raw: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_quota_limits(raw)
    assert err.value.details["field"] == field
