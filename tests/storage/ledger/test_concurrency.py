"""Processes race to book overlapping windows and partition changes; the ledger never double-books."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import text

from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec
from tests.conftest import SERIAL
from tests.processes import race_context
from tests.storage.ledger.race_worker import race

pytestmark = SERIAL  # eight processes race: alone, in the suite's serial group

WORKERS = 8
ATTEMPTS = 30

OVERLAPS_SQL = {
    "postgresql": "tstzrange(a.starts_at, a.ends_at, '[)') && tstzrange(b.starts_at, b.ends_at, '[)')",
    "sqlite": "a.starts_at < COALESCE(b.ends_at, '9999') AND b.starts_at < COALESCE(a.ends_at, '9999')",
}


def _url(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def test_racing_processes_never_double_book(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    mig = inventory.list_atoms(store, cls="gpu.mig").items
    gpus = sorted({a.gpu_id for a in mig})
    # A small contended set: four instances of one GPU and two of the other.
    atoms = [a.id for a in mig if a.gpu_id == gpus[0]][:4] + [a.id for a in mig if a.gpu_id == gpus[1]][:2]
    ctx = race_context()
    with ctx.Pool(WORKERS) as pool:
        results = pool.starmap(race, [(_url(store), w, atoms, gpus, ATTEMPTS, 7) for w in range(WORKERS)])
    outcomes = [o for worker in results for o in worker]

    # Every attempt ended in exactly one of booked or conflict.
    assert len(outcomes) == WORKERS * ATTEMPTS
    assert {o for _, o in outcomes} <= {"booked", "conflict"}
    assert len({a for a, _ in outcomes}) == len(outcomes)
    counts = Counter(o for _, o in outcomes)
    assert counts["booked"] > 0 and counts["conflict"] > 0

    overlap = OVERLAPS_SQL[store.dialect]
    with store.engine.connect() as conn:
        doubles = conn.execute(
            text(
                "SELECT count(*) FROM bookings a JOIN bookings b ON a.atom_id = b.atom_id AND a.id < b.id"
                f" WHERE a.state = 'live' AND b.state = 'live' AND {overlap}"
            )
        ).scalar_one()
        under_partition = conn.execute(
            text(
                "SELECT count(*) FROM bookings a JOIN bookings b ON a.gpu_id = b.gpu_id"
                " WHERE a.allocation_id NOT LIKE 'partition:%' AND b.allocation_id LIKE 'partition:%'"
                f" AND a.state = 'live' AND b.state = 'live' AND {overlap}"
            )
        ).scalar_one()
        stored = {r[0] for r in conn.execute(text("SELECT DISTINCT allocation_id FROM bookings"))}
    assert doubles == 0
    assert under_partition == 0
    # What the workers saw is what the ledger holds: booked attempts are stored, refused ones are not.
    assert stored == {a for a, o in outcomes if o == "booked"}
