"""How often admission reads a pool's recorded request sizes (service.placement.recorded_demand):
once, then again only when the record is `REFRESH_AFTER` old, after `REFRESH_ADMISSIONS`
admissions, or when the pool's atoms changed; and the gradient it gives over what it read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from better_compute.service.ledger.booking_index import BookingIndex, PoolAtoms
from better_compute.service.placement.recorded_demand import REFRESH_AFTER, RecordedDemand
from better_compute.storage.store import Store
from tests.api.test_fragmentation_choice import World
from tests.builders import T0

pytestmark = pytest.mark.both_stores  # the record is a query of each database's own


def atoms_of(store: Store, index: BookingIndex) -> PoolAtoms:
    with store.read() as tx:
        return index.pool_atoms(tx, "a100")


def gpu_of(pool: PoolAtoms, node: str) -> str:
    return min(a.gpu_id for a in pool.atoms.values() if a.node == node)


def test_the_record_is_read_once_per_refresh_interval(store: Store) -> None:
    World(store)
    index = BookingIndex()
    pool = atoms_of(store, index)
    demand = RecordedDemand(store, refresh_admissions=1000)
    for seconds in (0, 1, 30, 59):
        demand.of_pool("a100", pool, T0 + timedelta(seconds=seconds))
    assert demand.reads == 1
    demand.of_pool("a100", pool, T0 + REFRESH_AFTER)
    assert demand.reads == 2
    demand.of_pool("a100", pool, T0)  # a clock set back: the record is not from the future
    assert demand.reads == 3


def test_the_record_is_read_again_after_so_many_admissions(store: Store) -> None:
    World(store)
    index = BookingIndex()
    pool = atoms_of(store, index)
    demand = RecordedDemand(store, refresh_admissions=3)
    for _ in range(4):  # the first reads, the next three use it
        demand.of_pool("a100", pool, T0)
    assert demand.reads == 1
    demand.of_pool("a100", pool, T0)
    assert demand.reads == 2


def test_a_change_of_the_pools_atoms_reads_the_record_again(store: Store) -> None:
    World(store)
    index = BookingIndex()
    demand = RecordedDemand(store)
    demand.of_pool("a100", atoms_of(store, index), T0)
    index.forget_pool("a100")  # what the index does when the pool's atoms change
    demand.of_pool("a100", atoms_of(store, index), T0)
    assert demand.reads == 2


def test_the_gradient_is_over_the_recorded_sizes(store: Store) -> None:
    world = World(store)
    index = BookingIndex()
    pool = atoms_of(store, index)
    demand = RecordedDemand(store)
    # No record: one whole GPU, the size the pool's atoms come in; no GPU is worse to take.
    growth = demand.of_pool("a100", pool, T0)(set())
    assert growth("n1", gpu_of(pool, "n1"), 1000, 0) == growth("n2", gpu_of(pool, "n2"), 1000, 0) == 0.0
    world.two_gpus_were_asked()
    later = T0 + timedelta(hours=2)
    growth = demand.of_pool("a100", pool, later)(set())
    # Two GPUs asked: taking one of n1's pair strands the other (1000 milli); taking n2's only GPU
    # frees the pool of one that no request could use.
    assert growth("n1", gpu_of(pool, "n1"), 1000, 0) == 1000.0
    assert growth("n2", gpu_of(pool, "n2"), 1000, 0) == -1000.0
    # The atoms taken count: with n1's other GPU taken, its last GPU was already stranded.
    first, second = sorted((a for a in pool.atoms.values() if a.node == "n1"), key=lambda a: a.id)
    growth = demand.of_pool("a100", pool, later)({second.id})
    assert growth("n1", first.gpu_id, 1000, 0) == -1000.0
