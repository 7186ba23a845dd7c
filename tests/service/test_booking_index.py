"""The booking index is a cache of the ledger fed by the event log; late-committing events still count."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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


# Lengths that land in each way a booking is filed: by the hour, by the day, in the long set, open-ended.
_MINUTES = st.one_of(
    st.integers(1, 48 * 60),
    st.integers(48 * 60 + 1, 31 * 24 * 60),
    st.integers(31 * 24 * 60 + 1, 120 * 24 * 60),
    st.none(),
)
_BOOKING = st.tuples(st.integers(0, 60 * 24 * 60), _MINUTES)
_CHANGE = st.tuples(st.sampled_from(["released", "cancelled"]), st.integers(0, 60 * 24 * 60))


@settings(max_examples=200, deadline=None)
@given(
    bookings=st.lists(_BOOKING, min_size=1, max_size=25),
    changes=st.dictionaries(st.integers(0, 24), _CHANGE, max_size=8),
    windows=st.lists(st.tuples(st.integers(-24 * 60, 150 * 24 * 60), _MINUTES), min_size=1, max_size=8),
)
def test_busy_is_exactly_the_live_bookings_that_overlap_the_window(
    bookings: list[tuple[int, int | None]],
    changes: dict[int, tuple[str, int]],
    windows: list[tuple[int, int | None]],
) -> None:
    """Whatever their length, and after releases and cancellations, the index finds every booking
    that overlaps a window and no other (checked against a plain scan of the same bookings)."""
    minute = timedelta(minutes=1)
    live: dict[str, tuple[datetime, datetime | None]] = {}
    events: list[dict[str, Any]] = []
    for n, (start_m, length) in enumerate(bookings):
        start, end = T0 + start_m * minute, None if length is None else T0 + (start_m + length) * minute
        live[f"r{n}"] = (start, end)
        payload = {"atoms": [f"atom-{n}"], "start": start.isoformat(), "end": end and end.isoformat()}
        events.append(
            {"id": len(events) + 1, "type": "ledger.booked", "subject": f"r{n}", "payload": payload}
        )
    for n, (kind, at_m) in changes.items():
        if f"r{n}" not in live:
            continue
        moment = T0 + at_m * minute
        events.append(
            {
                "id": len(events) + 1,
                "type": f"ledger.{kind}",
                "subject": f"r{n}",
                "payload": {"at": moment.isoformat()},
            }
        )
        start, end = live.pop(f"r{n}")
        if kind == "released" and start < moment:  # started: ends then; not started: freed whole
            live[f"r{n}"] = (start, moment if end is None or end > moment else end)
    index = BookingIndex()
    tx: Any = SimpleNamespace(reservations=_Reservations(last=0))
    index.prepare(tx)
    index.apply(tx, events)
    for start_m, length in windows:
        window = Window(T0 + start_m * minute, None if length is None else T0 + (start_m + length) * minute)
        expected = {
            f"atom-{name[1:]}"
            for name, (start, end) in live.items()
            if (end is None or end > window.start) and (window.end is None or start < window.end)
        }
        found = [i.atom_id for i in index.busy(window)]
        assert sorted(found) == sorted(expected)
    # Looked up by atom, each live booking is found with its window, and nothing else.
    atoms = [f"atom-{n}" for n in range(len(bookings))]
    held = index.windows_of(atoms)
    assert {a: [(i.start, i.end) for i in held[a]] for a in atoms} == {
        f"atom-{n}": [live[f"r{n}"]] if f"r{n}" in live else [] for n in range(len(bookings))
    }
