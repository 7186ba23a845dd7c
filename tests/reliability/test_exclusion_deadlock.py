"""Defect (500): two admissions racing for the same atom can deadlock inside PostgreSQL's exclusion
constraint, and DeadlockDetected is not handled anywhere (no Overlap, no retry): the request fails
with a raw psycopg error, i.e. a 500.

Interleaving: a third transaction S holds an uncommitted live booking on atom A (for instance a
reservation whose bookings are written and which then fails: KeyTaken on its idempotency key, a
killed process, a dropped connection). Two processes admit a reservation for A at once: each one's
_PG_COMMIT inserts its booking into the gist index, sees S's and waits for S. S rolls back. Both
wake, re-scan, see each other's in-progress tuple and wait for each other: deadlock_detected (40P01)
kills one of them after deadlock_timeout. (The FOR SHARE row locks are compatible and never order
this; the wait is on the other transaction's xid.)

Two BookingIndex instances stand for two serve workers (claims only keep one process's threads apart).
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.reliability.interleave import libpq_url, lock_waiters

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="d-platform")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id="d-acme")
REQ = {"poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "1h"}


@pytest.mark.postgres
def test_two_admissions_waiting_on_a_rolled_back_booking_do_not_fail_with_a_500(pg_store: Store) -> None:
    store = pg_store
    load_fleet(store, parse_fleet(small_fleet(nodes=1, mode="exclusive")), T0)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO quotas VALUES ('acme', 'p1', 'gpu', 10, :at)"), {"at": T0})
        atoms = conn.execute(text("SELECT id, gpu_id FROM atoms WHERE class = 'gpu' AND bookable")).all()
    worker1, worker2 = BookingIndex(), BookingIndex()
    for index in (worker1, worker2):
        with store.read() as tx:
            index.sync(tx)
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    lock = threading.Lock()

    def next_id() -> str:
        with lock:
            return next(ids)

    outcomes: dict[str, object] = {}

    def admit(name: str, who: Principal, index: BookingIndex) -> None:
        try:
            outcomes[name] = reservations.create(store, index, who, REQ, T0, next_id).id
        except DomainError as refused:
            outcomes[name] = refused.code
        except BaseException as exc:  # what the API would answer 500 for
            outcomes[name] = f"500: {type(exc).__name__}: {exc}".splitlines()[0]

    with psycopg.connect(libpq_url(store)) as s:
        for atom_id, gpu_id in atoms:  # S books every atom, uncommitted
            s.execute(
                "INSERT INTO bookings (atom_id, gpu_id, pool_id, class, tenant_id, allocation_id,"
                " starts_at, ends_at, state, created_at) VALUES (%s, %s, 'p1', 'gpu', 'beta', 'stalled',"
                " %s, %s, 'live', %s)",
                (atom_id, gpu_id, T0, T0.replace(hour=12), T0),
            )
        threads = [
            threading.Thread(target=admit, args=("platform", OWNER, worker1)),
            threading.Thread(target=admit, args=("acme", ACME, worker2)),
        ]
        for t in threads:
            t.start()
        for _ in range(200):
            if lock_waiters(store) >= 2:
                break
            threads[0].join(0.05)
        assert lock_waiters(store) >= 2, outcomes
        s.rollback()
    for t in threads:
        t.join(30)
    assert not any(str(v).startswith("500") for v in outcomes.values()), outcomes
