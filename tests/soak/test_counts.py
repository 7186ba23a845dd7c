"""The soak's SQL counts (`soak.COUNTS`) read a ledger as the module says: a ledger is written here
in the states the defects leave (storage-level writes, past the service's checks) and each count
must name exactly those bookings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from better_compute.domain.fleet.atoms import atom_id_for
from better_compute.domain.kernel.timewin import Window
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import fleet_spec
from tests.soak import soak

pytestmark = pytest.mark.postgres


FENCE = "bookings_no_family_overlap"
"""The ledger's own fence against a GPU held whole and in parts at once: lifted while the states the
defects left are written, as a ledger from before it (or one restored around it) would hold them."""


@pytest.fixture
def unfenced(pg_store: Store) -> Iterator[Store]:
    """`pg_store` without the family fence, put back (over an emptied ledger) afterwards."""
    with pg_store.engine.begin() as conn:
        definition = conn.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"), {"name": FENCE}
        ).scalar_one()
        conn.execute(text(f"ALTER TABLE bookings DROP CONSTRAINT {FENCE}"))
    try:
        yield pg_store
    finally:
        with pg_store.engine.begin() as conn:
            conn.execute(text("DELETE FROM bookings"))
            conn.execute(text(f"ALTER TABLE bookings ADD CONSTRAINT {FENCE} {definition}"))


def test_the_counts_name_parent_and_child_held_at_once_and_bookings_left_on_dead_atoms(
    unfenced: Store, pg_store_url: str
) -> None:
    pg_store = unfenced
    now = datetime.now(UTC)
    spec = fleet_spec(nodes=1, layout="all-1g.10gb")
    load_fleet(pg_store, spec, now)
    with pg_store.read() as tx:
        a, b = sorted({atom.gpu_id for atom in tx.atoms.of_nodes(["n"])})

    def at(seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    with pg_store.begin() as tx:

        def book(gpu: str, key: str, start: float, end: float | None, rid: str, tenant: str | None) -> None:
            span = Window(at(start), None if end is None else at(end))
            tx.ledger.book([atom_id_for(gpu, key)], span, rid, tenant, now, require_bookable=False)

        book(a, "gpu", 10, 20, "rsv-whole", "acme")  # the parent, unbookable in MIG mode: stranded
        book(a, "mig:1g.10gb@0", 15, 25, "rsv-part", "platform")  # meets rsv-whole: one parent/child pair
        book(a, "mig:1g.10gb@1", 30, 40, "rsv-after", "platform")  # after it: no pair
        book(a, "gpu", -20, -10, "rsv-over", "acme")  # ended: neither a pair nor stranded
        book(b, "mig:1g.10gb@4", 5, 15, "rsv-gone", "acme")  # its instance gone below: stranded
        book(b, "mig:1g.10gb@4", 55, 60, "rsv-held", "acme")  # stranded, and under the hold below
        # A layout change's hold on b's family as the gate would book it, but without mig:1g.10gb@4 (as if
        # that atom came after the hold was booked): rsv-held lands under it.
        family = [atom_id_for(b, "gpu"), *(atom_id_for(b, f"mig:1g.10gb@{n}") for n in (0, 1, 2, 3, 5, 6))]
        tx.ledger.book(
            family, Window(at(50)), f"partition:{b}:{at(50).isoformat()}", None, now, require_bookable=False
        )
    with pg_store.engine.begin() as conn:
        conn.execute(
            text("UPDATE atoms SET present = false WHERE id = :id"), {"id": atom_id_for(b, "mig:1g.10gb@4")}
        )
    said: list[str] = []
    found = soak.counts(pg_store_url, said.append)
    assert found == {"overlaps": 0, "parentChildOverlaps": 1, "stranded": 3, "partitionHoldOverlaps": 1}
    rows = [json.loads(line) for line in said]
    assert sorted(r["row"][1] for r in rows if r["example"] == "stranded") == [
        "rsv-gone",
        "rsv-held",
        "rsv-whole",
    ]
    assert [(r["row"][3], r["row"][5]) for r in rows if r["example"] == "parentChildOverlaps"] == [
        ("rsv-whole", "rsv-part")
    ]
    assert [r["row"][3] for r in rows if r["example"] == "partitionHoldOverlaps"] == ["rsv-held"]
