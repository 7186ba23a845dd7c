"""Defect (stale cache, pre-existing pattern that forget_pool repeats): BookingIndex.pool_atoms reads
a pool's atoms outside the index lock and stores them unconditionally. If the pool changes and
another thread applies the change's events (which clear _pools) between that read and the store,
the pre-change atoms are cached with nothing left to clear them: until some later inventory or pool
event, admission chooses among atoms that no longer are the pool's. Atoms removed heal through
NotBookable -> forget_pool; atoms *added* (replicas 2 -> 4 here) stay invisible, and requests that
fit are refused INSUFFICIENT_CAPACITY indefinitely.

Interleaving: thread X (reservations.create) misses the cache and reads p1's atoms; pools.update
and the gate commit replicas 4; thread Y's admission applies the events (clears _pools); X stores
its read.
"""

from __future__ import annotations

import threading

import pytest

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools as pools_service
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.fleet import atoms as atoms_repo
from better_compute.storage.store import Store
from tests.builders import T0, settle_gate, small_fleet

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="c-platform")
ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="c-admin")


def _slots(n: int) -> dict:
    return {"poolId": "p1", "devices": [{"class": "gpu.slot", "count": n}], "duration": "1h"}


@pytest.mark.postgres
def test_atoms_added_by_a_pool_change_are_not_hidden_by_a_racing_cache_fill(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pg_store
    fleet = small_fleet(nodes=1, mode="timeslice", replicas=2)
    fleet["pools"][0]["ownerQuota"] = {"gpu.slot": 100}  # type: ignore[index]
    load_fleet(store, parse_fleet(fleet), T0)
    index = BookingIndex()
    with store.read() as tx:
        index.sync(tx)  # loaded; no pool atoms cached yet
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    read_done, proceed = threading.Event(), threading.Event()
    armed = {"on": True}
    real_of_pool = atoms_repo.SqlAtoms.of_pool

    def of_pool_then_pause(self, pool_id):  # type: ignore[no-untyped-def]
        rows = real_of_pool(self, pool_id)
        if armed["on"] and threading.current_thread().name == "X":
            armed["on"] = False
            read_done.set()
            assert proceed.wait(10)
        return rows

    monkeypatch.setattr(atoms_repo.SqlAtoms, "of_pool", of_pool_then_pause)
    x = threading.Thread(
        target=lambda: reservations.create(store, index, OWNER, _slots(1), T0, lambda: next(ids)), name="X"
    )
    x.start()
    assert read_done.wait(10)
    pools_service.update(store, ADMIN, "p1", policy={"replicas": 4}, now=T0)
    settle_gate(store, T0)  # the idle node is granted its new count: 2 GPUs x 4 slots now
    with store.read() as tx:
        index.sync(tx)  # thread Y's admission applies pool.updated: _pools cleared
    proceed.set()
    x.join(10)

    # 8 slots exist, 1 is booked: 7 fit.
    try:
        outcome = reservations.create(store, index, OWNER, _slots(7), T0, lambda: next(ids)).id
    except DomainError as refused:
        outcome = refused.code
    assert outcome != "INSUFFICIENT_CAPACITY"
