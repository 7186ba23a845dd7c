"""A workload write's atoms stay claimed in its process until the booking index shows them booked.

Claims keep requests of one process off the atoms another of them is booking. Ended at commit, they
left a moment in which the atoms were neither claimed nor (to a request that had caught up with the
log before that commit) booked: that request chose them and lost them to the ledger, a rollback and
a new attempt each time, which under many concurrent creates was a third of them."""

from __future__ import annotations

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.storage.store import Store
from tests.service.placement.test_workload_settle import ADMIN, NOW, body, fleet


def test_a_committed_workloads_atoms_stay_claimed_until_the_index_has_caught_up(store: Store) -> None:
    load_fleet(store, parse_fleet(fleet()), NOW)
    index = BookingIndex()
    wiring = workloads.Wiring(store, index, Stock(salt=0), RandomIds())
    view = workloads.create(wiring, ADMIN, body("first", 1), NOW)
    assert view.booked == 1
    claimed = index.claimed()
    assert len(claimed) == 8  # its replica's eight GPUs, committed and not in the index yet
    assert index.busy_from(claimed, NOW)[0] == set()
    second = workloads.create(wiring, ADMIN, body("second", 1), NOW)  # catches up, then chooses
    assert second.booked == 1
    assert index.busy_from(claimed, NOW)[0] == claimed  # the first's atoms are booked in the index
    assert index.claimed().isdisjoint(claimed)  # and no longer claimed
    with store.read() as tx:
        index.sync(tx)
    assert index.claimed() == set()
