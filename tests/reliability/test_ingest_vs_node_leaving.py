"""Defect: a node report ingested while a pool change takes that node out of the pool writes the
atoms back into the pool. ingest_in reads the node's pool (pools_of_nodes) and the old atom rows
without any lock, derives the atoms for that stale pool, and its ON CONFLICT DO UPDATE waits for the
change's row locks and then overwrites the change's `pool_id = NULL` with the old pool. The atoms
are then bookable in a pool whose member list no longer has their node; a reservation books them;
the node's next report sets `pool_id` NULL and the booking is stranded (the STRANDED_SQL state of
tests/reliability/test_pool_change_race.py), with no INVALID_STATE check on that path.

Interleaving: pools.update(p1, nodes=[n-2]) has rederived n-1's atoms (pool_id NULL, row-locked)
but not committed; n-1 reports a change (a GPU healthy again); the ingest reads pool p1 for n-1,
waits on the atom rows, the change commits, the ingest writes pool_id = p1.
"""

from __future__ import annotations

import dataclasses
import sys
import threading

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory
from better_compute.service.fleet import pools as pools_service
from better_compute.service.fleet.rederive import stored_reports
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, at, small_fleet
from tests.reliability.interleave import until_blocked

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="i-platform")
STRANDED_SQL = (
    "SELECT count(*) FROM bookings b JOIN atoms a ON a.id = b.atom_id"
    " WHERE b.state = 'live' AND (b.ends_at IS NULL OR b.ends_at > :now)"
    " AND (NOT a.present OR NOT a.bookable OR a.pool_id IS NULL OR a.pool_id <> b.pool_id)"
)


def _report(store: Store, node: str, healthy: bool):  # type: ignore[no-untyped-def]
    with store.read() as tx:
        (report,) = stored_reports(tx, [node])
    first = dataclasses.replace(report.gpus[0], healthy=healthy)
    return dataclasses.replace(report, gpus=(first, *report.gpus[1:]))


@pytest.mark.postgres
def test_a_report_during_node_removal_does_not_put_the_atoms_back(pg_store: Store) -> None:
    store = pg_store
    load_fleet(store, parse_fleet(small_fleet(nodes=2, mode="exclusive")), T0)
    inventory.ingest(store, [_report(store, "n-1", healthy=False)], T0)  # n-1's first GPU is down

    change = store.begin()
    tx = change.__enter__()
    errors: list[BaseException] = []

    def report_healthy_again() -> None:
        try:
            inventory.ingest(store, [_report(store, "n-1", healthy=True)], at(0.1))
        except BaseException as exc:
            errors.append(exc)

    racer = threading.Thread(target=report_healthy_again)
    try:
        pools_service.update_in(tx, "p1", None, ["n-2"], None, None, T0)  # n-1 leaves p1
        racer.start()
        until_blocked(store, racer)
    except BaseException:
        change.__exit__(*sys.exc_info())
        raise
    change.__exit__(None, None, None)
    racer.join(30)
    assert not errors, errors

    with store.engine.connect() as conn:
        members = [r[0] for r in conn.execute(text("SELECT node_id FROM pool_nodes WHERE pool_id = 'p1'"))]
        in_p1 = conn.execute(
            text("SELECT count(*) FROM atoms WHERE node_id = 'n-1' AND pool_id = 'p1' AND present")
        ).scalar_one()
    # Follow-on damage: a reservation books the leftover atom, the node's next report strands it.
    booked = None
    if in_p1:
        raw = {"poolId": "p1", "devices": [{"class": "gpu", "count": 3}], "duration": "2h"}
        booked = reservations.create(store, BookingIndex(), OWNER, raw, at(0.2), lambda: "rsv-x").id
        inventory.ingest(store, [_report(store, "n-1", healthy=True)], at(0.3))
    with store.engine.connect() as conn:
        stranded = conn.execute(text(STRANDED_SQL), {"now": at(0.3)}).scalar_one()
    assert members == ["n-2"]
    assert in_p1 == 0 and stranded == 0, (in_p1, booked, stranded)
