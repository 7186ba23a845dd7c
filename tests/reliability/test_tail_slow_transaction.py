"""Defect: a transaction that committed after a later event was seen lost every event but its first.

The event tail asks about transactions still in progress when it read the log; once a read shows
one ended, it takes that transaction's events below `last`. It marked the transaction done at the
first of them, so a second one (a workload's replica booking after the workload's creation, in one
transaction) was skipped as already seen. The booking index never learned the booking: the tenant's
holding was undercounted (admission let it past its quota) and the atom was offered again, each
request that chose it losing to the exclusion constraint, until a full reload.

Interleaving (two real transactions on PostgreSQL, no timing): A writes an event and books an atom
for acme; B commits an event after them; the index reads the log (sees B's, A still open); A
commits; acme, whose quota is one device, asks for another.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.placement.events import WorkloadCreated
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.events import TenantCreated
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.kernel.events import SqlEvents
from better_compute.storage.ledger.ledger import SqlLedger
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet

ACME = Principal(tenant_id="acme", is_admin=False, credential_id="g-acme")
REQ = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


@pytest.mark.postgres
def test_a_slow_transactions_second_event_is_not_lost(pg_store: Store) -> None:
    store = pg_store
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-1g.10gb")), T0)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO quotas VALUES ('acme', 'p1', 'gpu.mig', 1, :at)"), {"at": T0})
        atom = conn.execute(
            text("SELECT id FROM atoms WHERE pool_id = 'p1' ORDER BY id LIMIT 1")
        ).scalar_one()
    index = BookingIndex()
    with store.read() as tx:
        index.sync(tx)  # loaded: nothing booked

    slow = store.engine.connect()
    a = slow.begin()
    SqlEvents(slow).append(WorkloadCreated("wkl-1", "acme", "w", "c", 1, 1), T0)
    SqlLedger(slow).book([atom], Window(T0, None), "dep-1.r0", "acme", T0)
    with store.engine.begin() as b:  # a later event id, committed first
        SqlEvents(b).append(TenantCreated("someone", "someone"), T0)
    with store.read() as tx:
        index.sync(tx)  # sees B's event; A is still in progress
    a.commit()
    slow.close()
    with store.read() as tx:
        index.sync(tx)  # A ended: both of its events are applied

    assert index.knows_booking_of(atom)
    with pytest.raises(DomainError) as refused:
        reservations.create(store, index, ACME, REQ, T0, lambda: "rsv-1")
    assert refused.value.code == "QUOTA_EXCEEDED"
