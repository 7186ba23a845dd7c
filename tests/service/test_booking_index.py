"""The booking index is a cache of the ledger fed by the event log; late-committing events still count."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from better_compute.domain.timewin import Window
from better_compute.service.booking_index import BookingIndex
from tests.builders import T0, at


class _Reservations:
    def __init__(self, last: int) -> None:
        self.last = last
        self.pages: list[list[dict[str, Any]]] = []

    def last_event_id(self) -> int:
        return self.last

    def live_bookings(self, since: object) -> list[dict[str, Any]]:
        return []

    def events_after(self, event_id: int, limit: int, gaps: object = ()) -> list[dict[str, Any]]:
        return self.pages.pop(0) if self.pages else []


def booked(event_id: int, allocation: str, atom: str, start_h: float, end_h: float) -> dict[str, Any]:
    return {
        "id": event_id,
        "type": "ledger.booked",
        "subject": allocation,
        "payload": {"atoms": [atom], "start": at(start_h).isoformat(), "end": at(end_h).isoformat()},
    }


def test_an_event_that_commits_after_a_later_one_is_not_lost() -> None:
    index = BookingIndex()
    tx: Any = SimpleNamespace(reservations=_Reservations(last=10))
    assert index.prepare(tx) == (10, [])
    # Event 12 is visible before event 11 has committed.
    index.apply(tx, [booked(12, "b", "atom-b", 0, 1)])
    last, gaps = index.prepare(tx)
    assert (last, gaps) == (12, [11])
    index.apply(tx, [booked(11, "a", "atom-a", 0, 1)])
    assert index.prepare(tx) == (12, [])
    assert {i.atom_id for i in index.busy(Window(T0, T0 + timedelta(minutes=30)))} == {"atom-a", "atom-b"}


def test_release_and_cancel_follow_the_ledger() -> None:
    index = BookingIndex()
    tx: Any = SimpleNamespace(reservations=_Reservations(last=0))
    index.prepare(tx)
    index.apply(
        tx,
        [
            booked(1, "a", "atom-a", 0, 4),
            booked(2, "b", "atom-b", 5, 6),
            {"id": 3, "type": "ledger.released", "subject": "a", "payload": {"at": at(1).isoformat()}},
            {"id": 4, "type": "ledger.cancelled", "subject": "b", "payload": {"at": at(1).isoformat()}},
        ],
    )
    assert [i.atom_id for i in index.busy(Window(at(0), at(10)))] == ["atom-a"]
    assert index.busy(Window(at(1), at(10))) == []
