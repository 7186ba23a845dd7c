"""After INSUFFICIENT_CAPACITY: the earliest start at which the whole reservation could be served."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.ledger.choose import Chosen
from better_compute.service.kernel.event_tail import Cursor, LogSnapshot
from better_compute.service.ledger.booking_index import BookingIndex, PoolAtoms
from better_compute.service.ledger.reservations import _decide, _earliest
from better_compute.storage.kernel.events import logged
from tests.builders import T0, at, atom, device_request


def _apply(
    index: BookingIndex, tx: Any, read: Cursor, events: list[dict[str, Any]], newest: int, snap: LogSnapshot
) -> None:
    """Apply events given as the log stores them (parsed as the store parses them)."""
    index.apply(tx, read, logged(events), newest, snap)


def gpu(n: int, model: str = "H100-80GB") -> Atom:
    return atom(f"g{n}", node=f"n{n // 8}", attributes={"gpuModel": model})


def whole(count: int = 1, model: str | None = None) -> DeviceRequest:
    return device_request("gpu", count) if model is None else device_request("gpu", count, gpuModel=[model])


def index_with(*bookings: tuple[str, float, float]) -> BookingIndex:
    """An index holding (atom, start hour, end hour) bookings, fed as the event log would feed it."""
    index = BookingIndex()
    tx: Any = SimpleNamespace(
        events=SimpleNamespace(tail_start=lambda: (0, LogSnapshot())),
        ledger=SimpleNamespace(live_bookings=lambda since: []),
    )
    read = index.prepare(tx)
    events = [
        {
            "id": n + 1,
            "type": "ledger.booked",
            "subject": f"r{n}",
            "payload": {"atoms": [atom], "start": at(start).isoformat(), "end": at(end).isoformat()},
        }
        for n, (atom, start, end) in enumerate(bookings)
    ]
    _apply(index, tx, read, events, len(events), LogSnapshot())
    return index


HOUR = Window(T0, T0 + timedelta(hours=1))


def test_a_request_narrower_than_its_neighbour_waits_for_its_own_atoms() -> None:
    # One H100 (booked until 14:00) and one A100: an H100 plus any GPU fit from 14:00.
    pool = PoolAtoms({a.id: a for a in [gpu(0), gpu(1, "A100-80GB")]})
    index = index_with(("g0/gpu", 0, 5))
    assert _earliest(index, pool, [whole(model="H100-80GB"), whole()], HOUR) == at(5).isoformat()


def test_the_start_found_is_one_the_whole_reservation_fits_at() -> None:
    # Each request fits alone from 11:00 (two of four GPUs free); together they need three: 14:00.
    pool = PoolAtoms({a.id: a for a in [gpu(n) for n in range(4)]})
    index = index_with(("g0/gpu", 0, 2), ("g1/gpu", 0, 5), ("g2/gpu", 0, 5))
    assert _earliest(index, pool, [whole(1), whole(1)], HOUR) == at(2).isoformat()
    assert _earliest(index, pool, [whole(1), whole(2)], HOUR) == at(5).isoformat()


def test_no_start_is_given_when_the_pool_can_never_hold_the_reservation() -> None:
    pool = PoolAtoms({a.id: a for a in [gpu(n) for n in range(4)]})
    assert _earliest(index_with(), pool, [whole(2), whole(3)], HOUR) is None
    assert _earliest(index_with(), pool, [whole(5)], HOUR) is None


def test_a_window_ending_past_the_year_9999_has_no_start() -> None:
    # Both GPUs are free only from 14:00, and a window that long would then end past the year 9999.
    pool = PoolAtoms({a.id: a for a in [gpu(0), gpu(1)]})
    index = index_with(("g0/gpu", 0, 5))
    long = Window(T0, datetime.max.replace(tzinfo=UTC) - timedelta(hours=2))
    assert _earliest(index, pool, [whole(1), whole(model="H100-80GB")], long) is None


def test_many_requests_of_one_shape_are_served_together() -> None:
    pool = PoolAtoms({a.id: a for a in [gpu(n) for n in range(64)]})
    decision, _ = _decide(pool, [whole(1)] * 21, set())
    assert isinstance(decision, Chosen) and len(set(decision.atom_ids)) == 21
