"""Both stores write every event from its one definition (domain.kernel.events): the same story told to
SQLite and to PostgreSQL leaves logs that parse alike, event for event."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from better_compute.domain.kernel.events import Event, UnknownEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerBooked
from better_compute.domain.ops.event_types import parse_event
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import clusters, inventory, pools
from better_compute.service.ledger import ledger, reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import quotas, tenants
from better_compute.storage.kernel.events import booked_payload_sql
from better_compute.storage.kernel.tables import events
from better_compute.storage.store import Store
from tests.builders import T0, at, small_fleet

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="owner")


def _story(store: Store) -> list[tuple[str, Event]]:
    """A day of the fleet: load, offer, reserve, release, cancel, book and end a partition change."""
    fleet = small_fleet(nodes=1, layout="all-1g.10gb")
    fleet["pools"][0]["ownerQuota"] = {"gpu.mig": 14}  # type: ignore[index]
    load_fleet(store, parse_fleet(fleet), T0)
    tenants.create(store, ADMIN, "beta", "Beta", T0)
    quotas.set_quota(store, OWNER, "acme", "p1", "gpu.mig", 3, T0)
    pools.offer(store, OWNER, "p1", "acme", {"gpu.mig": 4}, T0)
    index = BookingIndex()
    ids = iter(f"rsv-{n}" for n in range(10))
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 2}], "duration": "2h"}
    made = reservations.create(store, index, OWNER, body, T0, lambda: next(ids))
    later = reservations.create(
        store, index, OWNER, {**body, "start": at(5).isoformat()}, T0, lambda: next(ids)
    )
    reservations.release(store, OWNER, made.id, at(1))
    reservations.cancel(store, OWNER, later.id, at(1))
    atom = next(a for a in inventory.list_atoms(store, cls="gpu.mig").items if a.bookable)
    ledger.book(store, [atom.id], Window(at(10), None), "alloc-open", None, at(1))
    ledger.release(store, "alloc-open", at(11))
    change = ledger.book_partition_change(store, atom.gpu_id, Window(at(20), at(21)), at(2))
    assert isinstance(change, ledger.PartitionChange)
    ledger.release_partition_change(store, change.booking_id, at(20))
    clusters.update(store, ADMIN, "c1", "draining", at(21))
    clusters.update_node(store, ADMIN, atom.node, True, at(21))
    clusters.update_node(store, ADMIN, atom.node, False, at(22))
    with store.engine.connect() as conn:
        rows = conn.execute(select(events.c.type, events.c.subject, events.c.payload).order_by(events.c.id))
        return [(t, parse_event(t, s, p)) for t, s, p in rows]


@pytest.fixture
def both(tmp_path: Path, pg_store_url: str) -> Iterator[tuple[Store, Store]]:
    from tests.conftest import _truncate_all

    sqlite = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    pg = Store.open(pg_store_url, migrate_schema=False)
    _truncate_all(pg)
    try:
        yield sqlite, pg
    finally:
        sqlite.close()
        pg.close()


@pytest.mark.postgres
def test_both_stores_log_the_same_story_as_the_same_events(both: tuple[Store, Store]) -> None:
    sqlite_log, pg_log = (_story(s) for s in both)
    assert [t for t, _ in sqlite_log] == [t for t, _ in pg_log]
    # Within one statement the stores may write a family's bookings in another order (PostgreSQL
    # locks atoms in id order): the same events, not necessarily in the same order.
    assert sorted(map(repr, sqlite_log)) == sorted(map(repr, pg_log))
    kinds = {t for t, _ in pg_log}
    assert {"ledger.booked", "ledger.released", "ledger.cancelled", "gpu.partition.booked"} <= kinds
    assert {"cluster.updated", "node.cordoned", "node.uncordoned"} <= kinds
    assert not any(isinstance(e, UnknownEvent) for _, e in pg_log)
    booked = [e for _, e in pg_log if isinstance(e, LedgerBooked)]
    assert {e.cls for e in booked} == {"gpu.mig", "gpu"} and {e.pool_id for e in booked} == {"p1"}


def test_sqlites_booking_trigger_writes_the_payload_the_event_defines(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    try:
        with store.engine.connect() as conn:
            (trigger,) = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'bookings_booked_event'"
            ).one()
    finally:
        store.close()
    # A change to LedgerBooked.COLUMNS fails here until a migration installs the trigger anew.
    assert booked_payload_sql("sqlite", "NEW") in trigger
    assert f"'{LedgerBooked.TYPE}'" in trigger
