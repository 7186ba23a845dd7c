"""The rules behind `reservations.extend`, `policy.maxDuration`, `pools.delete` and quota usage."""

from __future__ import annotations

from datetime import timedelta

import pytest

from better_compute.domain.fleet.pools import (
    check_deletable,
    check_duration_allowed,
    check_settings,
    stored_settings,
)
from better_compute.domain.kernel.errors import InvalidInput, InvalidState
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.reservations import extended_end
from better_compute.domain.tenancy.quota import held_at
from tests.builders import at

HOUR = timedelta(hours=1)


def test_an_extension_moves_the_end_of_a_scheduled_or_active_reservation() -> None:
    window = Window(at(1), at(3))
    assert extended_end(window, "scheduled", HOUR, at(0)) == at(4)
    assert extended_end(window, "scheduled", HOUR, at(2)) == at(4)  # active by then


@pytest.mark.parametrize(
    ("stored", "now", "status"),
    [("scheduled", at(5), "ended"), ("cancelled", at(0), "cancelled"), ("released", at(2), "released")],
)
def test_an_ended_cancelled_or_released_reservation_is_not_extended(
    stored: str, now: object, status: str
) -> None:
    with pytest.raises(InvalidState) as refused:
        extended_end(Window(at(1), at(3)), stored, HOUR, now)  # type: ignore[arg-type]
    assert refused.value.details == {"status": status}


def test_an_extension_must_be_positive_and_end_by_the_year_9999() -> None:
    with pytest.raises(InvalidInput):
        extended_end(Window(at(1), at(3)), "scheduled", timedelta(0), at(0))
    with pytest.raises(InvalidInput) as late:
        extended_end(Window(at(1), at(3)), "scheduled", timedelta(days=3_000_000), at(0))
    assert "year 9999" in str(late.value)


def test_max_duration_is_kept_as_written_beside_the_other_settings() -> None:
    settings = check_settings("mig", {"migLayout": "all-1g.10gb", "maxDuration": "90m"}, "pools.create")
    assert settings.as_mapping() == {"migLayout": "all-1g.10gb", "maxDuration": "90m"}
    assert stored_settings("mig", settings.as_mapping()) == settings
    assert stored_settings("exclusive", {"maxDuration": "8h"}).max_duration == "8h"
    assert stored_settings("mps", {"replicas": 2}).max_duration is None
    with pytest.raises(InvalidInput) as bad:
        check_settings("exclusive", {"maxDuration": 8}, "pools.create")
    assert bad.value.details == {"field": "pools.create.policy.maxDuration"}


def test_max_duration_refuses_longer_and_open_ended_reservations() -> None:
    check_duration_allowed("p1", None, None)
    check_duration_allowed("p1", "90m", timedelta(minutes=90))
    with pytest.raises(InvalidInput) as longer:
        check_duration_allowed("p1", "90m", timedelta(minutes=91, seconds=5))
    assert (
        str(longer.value)
        == "pool p1 allows reservations of at most 90m (1h30m); this one would be 1h31m05s long"
    )
    with pytest.raises(InvalidInput) as open_ended:
        check_duration_allowed("p1", "1h", None)
    assert str(open_ended.value).endswith("this one would be open-ended")


def test_only_an_empty_pool_without_reservations_may_be_deleted() -> None:
    check_deletable("p1", [], False)
    with pytest.raises(InvalidState) as nodes:
        check_deletable("p1", [f"n{i}" for i in range(7)], False)
    assert "7 node(s) (n0, n1, n2, n3, n4, ...)" in str(nodes.value)
    with pytest.raises(InvalidState, match="has reservations"):
        check_deletable("p1", [], True)


def test_held_at_counts_bookings_that_hold_the_instant() -> None:
    bookings = [
        ("acme", "p1", "gpu", Window(at(0), at(2))),
        ("acme", "p1", "gpu", Window(at(1), None)),
        ("acme", "p1", "gpu", Window(at(2), at(3))),  # starts at 2: not yet held at 1.5
        ("acme", "p1", "gpu.mig", Window(at(0), at(1))),  # ended at 1
        (None, "p1", "gpu", Window(at(0), at(5))),  # a partition change holds no tenant's quota
    ]
    assert held_at(bookings, at(1.5)) == {("acme", "p1", "gpu"): 2}
