"""Defect: a run of more than PAGE (5000) event ids with nothing visible in it makes the event tail
spin for ever. An incomplete read (its page (last, last+5000] did not reach the log's end) only moves
`last` to the largest id it *saw*; when the page holds no visible event (ids burned by a rolled-back
transaction, or written by one still in progress), `last` does not move, the next read asks for the
same page, and BookingIndex.sync loops under the index lock without end. Every admission thread of
the process then queues on that lock: reservations.create never returns.

Interleaving: index loaded at event id L; a transaction inserts > 5000 events and rolls back (a
large reservation refused at commit, a fleet ingest of many nodes that fails, or a process killed
mid-transaction); any later commit writes event id > L + 5000; the next admission hangs.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.kernel.event_tail import PAGE
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet

ACME = Principal(tenant_id="acme", is_admin=False, credential_id="g-acme")
OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="g-platform")
REQ = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


@pytest.mark.postgres
@pytest.mark.parametrize("ending", ["rollback", "in-progress"])
def test_more_than_a_page_of_invisible_ids_hangs_admission(pg_store: Store, ending: str) -> None:
    store = pg_store
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-1g.10gb")), T0)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO quotas VALUES ('acme', 'p1', 'gpu.mig', 10, :at)"), {"at": T0})
        conn.execute(text("INSERT INTO quotas VALUES ('platform', 'p1', 'gpu.mig', 10, :at)"), {"at": T0})
    index = BookingIndex()
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    reservations.create(store, index, ACME, REQ, T0, lambda: next(ids))  # index loaded

    big = store.engine.connect()
    tx = big.begin()
    big.execute(
        text(
            "INSERT INTO events (type, subject, payload, at)"
            " SELECT 'node.inventory.changed', 'n', '{}'::json, :at FROM generate_series(1, :n)"
        ),
        {"at": T0, "n": PAGE + 10},
    )
    if ending == "rollback":
        tx.rollback()
    # Another process's reservation commits after the burned/in-progress ids.
    reservations.create(store, BookingIndex(), OWNER, REQ, T0, lambda: next(ids))

    done: dict[str, object] = {}

    def admit() -> None:
        try:
            done["view"] = reservations.create(store, index, ACME, REQ, T0, lambda: next(ids)).id
        except BaseException as exc:
            done["error"] = exc

    t = threading.Thread(target=admit, daemon=True)
    t.start()
    t.join(10)
    hung = t.is_alive()
    # Unstick the spinning reader so the test process can end (the defect is shown by `hung`).
    index._follower.tail.complete = lambda read, newest: True  # type: ignore[method-assign]
    t.join(10)
    if ending == "in-progress":
        tx.rollback()
    big.close()
    assert not hung, f"reservations.create still running after 10 s ({ending}); {done}"


@pytest.mark.postgres
def test_a_refused_pool_change_on_a_large_pool_hangs_admission(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same hang from an ordinary, designed refusal. pools.update taking four nodes out of the
    pool rederives each of them (one node.inventory.changed event each) and only then finds a live
    booking on a slot that would leave: INVALID_STATE, rolled back, one burned event id per node. With
    a pool of more nodes than PAGE that is a run of > PAGE ids nobody will ever see. PAGE is lowered
    to 3 here so that a 5-node pool shows it; with the real PAGE it takes a pool of 5001+ nodes (or a
    refused fleet load)."""
    from better_compute.domain.kernel.errors import DomainError
    from better_compute.service.fleet import pools as pools_service
    from better_compute.service.kernel import event_tail
    from better_compute.storage.kernel import events as storage_events

    monkeypatch.setattr(event_tail, "PAGE", 3)
    monkeypatch.setattr(storage_events, "EVENT_PAGE", 3)
    store = pg_store
    fleet = small_fleet(nodes=5, mode="timeslice", replicas=4)
    fleet["pools"][0]["ownerQuota"] = {"gpu.slot": 100}  # type: ignore[index]
    load_fleet(store, parse_fleet(fleet), T0)
    index = BookingIndex()
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    slot = {"poolId": "p1", "devices": [{"class": "gpu.slot", "count": 1}], "duration": "1h"}
    held = reservations.create(store, index, OWNER, slot, T0, lambda: next(ids))
    kept = next(f"n-{i}" for i in range(1, 6) if f"n-{i}" != held.atoms[0].node)
    admin = Principal(tenant_id=None, is_admin=True, credential_id="g-admin")
    with pytest.raises(DomainError) as refused:
        pools_service.update(store, admin, "p1", nodes=[kept], now=T0)
    assert refused.value.code == "INVALID_STATE"
    reservations.create(store, BookingIndex(), OWNER, slot, T0, lambda: next(ids))  # another process

    done: dict[str, object] = {}

    def admit() -> None:
        try:
            done["view"] = reservations.create(store, index, OWNER, slot, T0, lambda: next(ids)).id
        except BaseException as exc:
            done["error"] = exc

    t = threading.Thread(target=admit, daemon=True)
    t.start()
    t.join(10)
    hung = t.is_alive()
    index._follower.tail.complete = lambda read, newest: True  # type: ignore[method-assign]
    t.join(10)
    assert not hung, f"reservations.create still running after 10 s; {done}"
