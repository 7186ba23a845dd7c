"""`usage.held_shapes`, on SQLite and PostgreSQL alike: what each reservation held, per GPU (whole GPUs
per node), counted per pool and size; what the pools' fragmentation is measured against."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import HeldShape
from better_compute.storage.store import Store
from tests.api.test_reservations import World
from tests.builders import T0

_INSTANT = timedelta(microseconds=1)


def shapes(store: Store, since: timedelta, now: timedelta) -> list[HeldShape]:
    with store.read() as tx:
        return tx.usage.held_shapes(Window(T0 + since, T0 + now + _INSTANT), T0 + now)


def test_held_shapes_group_each_reservation_per_gpu_and_whole_gpus_per_node(store: Store) -> None:
    world = World(store)
    world.offer("l40s", "platform", gpu_slot=8)
    world.offer("h100", "platform", gpu_mig=8)
    # a100: 2 nodes of 2 A100s. Four whole GPUs spread over both nodes: two holdings of 2 GPUs.
    assert (
        world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="1h").status_code
        == 201
    )
    # l40s (4 slots a GPU): 3 on one GPU, then 2 together on the other (one holding of each size)
    assert world.reserve(world.platform, "l40s", [{"class": "gpu.slot", "count": 3}]).status_code == 201
    two = world.reserve(world.platform, "l40s", [{"class": "gpu.slot", "count": 2, "sameGpu": True}])
    assert two.status_code == 201, two.text
    # h100: a 3g.40gb (3/7 of an H100)
    selector = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]}
    mig = [{"class": "gpu.mig", "count": 1, "selector": selector}]
    assert world.reserve(world.platform, "h100", mig, start="2026-12-01T12:00:00Z").status_code == 201

    assert shapes(store, timedelta(days=-30), timedelta(0)) == [
        HeldShape("a100", "gpu", Fraction(1), 2, 2),
        HeldShape("l40s", "gpu.slot", Fraction(1, 4), 2, 1),
        HeldShape("l40s", "gpu.slot", Fraction(1, 4), 3, 1),
    ]  # the h100 booking starts later: not held yet
    later = shapes(store, timedelta(days=-30), timedelta(hours=5))
    assert HeldShape("h100", "gpu.mig", Fraction(3, 7), 1, 1) in later
    assert HeldShape("a100", "gpu", Fraction(1), 2, 2) in later  # ended, still in the period
    # Past the period: a window after every booking ended holds none of them.
    assert shapes(store, timedelta(days=2), timedelta(days=3)) == []


def test_held_shapes_of_some_allocations_count_only_theirs_and_add_up_to_all(store: Store) -> None:
    """Each reservation's holdings are its own: the counts of a set of allocations are what they
    add to the whole (replay's record of request sizes adds the new allocations' at each read)."""
    world = World(store)
    world.offer("l40s", "platform", gpu_slot=8)
    made = [
        world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="1h"),
        world.reserve(world.platform, "l40s", [{"class": "gpu.slot", "count": 3}]),
        world.reserve(world.platform, "l40s", [{"class": "gpu.slot", "count": 2, "sameGpu": True}]),
    ]
    assert all(r.status_code == 201 for r in made)
    ids = [r.json()["id"] for r in made]
    period = Window(T0 - timedelta(days=30), T0 + _INSTANT)
    with store.read() as tx:
        whole = tx.usage.held_shapes(period, T0)
        first = tx.usage.held_shapes(period, T0, ids[:1])
        rest = tx.usage.held_shapes(period, T0, ids[1:])
        none = tx.usage.held_shapes(period, T0, ["rsv-none"])
    assert first == [HeldShape("a100", "gpu", Fraction(1), 2, 2)]
    assert rest == [
        HeldShape("l40s", "gpu.slot", Fraction(1, 4), 2, 1),
        HeldShape("l40s", "gpu.slot", Fraction(1, 4), 3, 1),
    ]
    assert sorted(first + rest, key=lambda h: (h.pool_id, h.cls, h.share, h.atoms)) == whole
    assert none == []
