"""Releasing an allocation: the ledger's SQL and the booking index both do what
`domain.ledger.ledger.released` says, booking by booking (started ones cut at the release, future ones
cancelled, finished ones kept)."""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import released
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory
from better_compute.service.ledger import ledger
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec

_ROUND = itertools.count()
_HOURS = st.integers(min_value=0, max_value=12)
_SPANS = st.lists(
    st.tuples(_HOURS, st.one_of(st.none(), st.integers(min_value=1, max_value=6))), min_size=1, max_size=4
)


def _windows(base_h: int, spans: list[tuple[int, int | None]]) -> list[Window]:
    base = T0 + timedelta(hours=base_h)
    return [
        Window(base + timedelta(hours=s), None if d is None else base + timedelta(hours=s + d))
        for s, d in spans
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=_SPANS, release_h=_HOURS, now_h=_HOURS)
def test_the_ledger_and_the_index_release_as_the_rule_says(
    store: Store, spans: list[tuple[int, int | None]], release_h: int, now_h: int
) -> None:
    n = next(_ROUND)
    if n == 0 or not hasattr(store, "_release_atoms"):
        load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
        store._release_atoms = [  # type: ignore[attr-defined]
            a.id for a in inventory.list_atoms(store, cls="gpu.mig", limit=100).items if a.bookable
        ]
    atoms: list[str] = store._release_atoms  # type: ignore[attr-defined]
    base_h = 100 * n  # each example books its own stretch of time, after the last one's
    windows = _windows(base_h, spans)
    booked_at = T0 + timedelta(hours=base_h + now_h) - timedelta(days=1)
    allocation = f"alloc-{n}"
    for atom, window in zip(atoms, windows, strict=False):
        ledger.book(store, [atom], window, allocation, "acme", booked_at)
    at = T0 + timedelta(hours=base_h + release_h)
    expected = sorted(
        (atom, w) for atom, w in zip(atoms, (released(w, at) for w in windows), strict=False) if w is not None
    )

    index = BookingIndex()
    with store.read() as tx:
        index.sync(tx)
    ledger.release(store, allocation, at)
    with store.read() as tx:
        stored = sorted(
            (b.atom_id, b.span) for b in tx.ledger.allocation_bookings(allocation) if b.state == "live"
        )
        index.sync(tx)  # applies the release event to what it loaded before
    assert stored == expected
    kept = index.windows_of(atoms[: len(windows)])
    assert (
        sorted(
            (a, Window(i.start, i.end))
            for a, found in kept.items()
            for i in found
            if i.allocation_id == allocation
        )
        == expected
    )
