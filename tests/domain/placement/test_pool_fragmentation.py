"""A pool's atoms as the fragmentation measure's free milli-GPUs, and its holdings as task shapes:
each figure worked out by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from better_compute.domain.fleet.atoms import Atom, AttrValue
from better_compute.domain.metering.metering import HeldShape
from better_compute.domain.placement.fragmentation import TaskShape
from better_compute.domain.placement.pool_fragmentation import (
    free_milli_by_node,
    held_demand,
    offered_demand,
    pool_fragmentation,
    pool_shape,
    task_shape,
)
from tests.builders import atom


def slot_gpu(gpu: str, node: str, slots: int = 4) -> list[Atom]:
    attrs: dict[str, AttrValue] = {"sharing": "timeslice", "slots": slots}
    parent = atom(gpu, "gpu", node=node, bookable=False)
    return [
        parent,
        *(atom(gpu, f"slot:{n}", node=node, attributes={**attrs, "slot": n}) for n in range(slots)),
    ]


def mig_gpu(gpu: str, node: str, profiles: list[str]) -> list[Atom]:
    parent = atom(gpu, "gpu", node=node, bookable=False)
    return [
        parent,
        *(
            atom(gpu, f"mig:{p}@{n}", node=node, attributes={"gpuModel": "H100-80GB", "migProfile": p})
            for n, p in enumerate(profiles)
        ),
    ]


def test_whole_gpus_are_1000_when_free_and_0_when_taken_or_unusable() -> None:
    atoms = [
        atom("a1", node="n1"),
        atom("a2", node="n1"),
        atom("b1", node="n2", bookable=False),  # unhealthy
        atom("b2", node="n2", partition_pending=True),
    ]
    assert free_milli_by_node(pool_shape(atoms), {"a2/gpu"}) == [[1000, 0], [0, 0]]


def test_slots_are_their_free_share_and_a_taken_parent_frees_nothing() -> None:
    atoms = slot_gpu("s1", "n1") + slot_gpu("s2", "n1")
    # s1: slots 0 and 1 booked (2 of 4 free: 500); s2: booked whole, so its slots are taken too
    taken = {"s1/slot:0", "s1/slot:1", "s2/gpu", *(f"s2/slot:{n}" for n in range(4))}
    assert free_milli_by_node(pool_shape(atoms), taken) == [[500, 0]]


def test_mig_instances_are_their_compute_slices_over_the_models() -> None:
    atoms = mig_gpu("m1", "n1", ["3g.40gb", "2g.20gb", "2g.20gb"])
    # the 3g.40gb booked: two free 2g.20gb, each 2/7 of an H100 = 286 milli, each usable only whole
    assert free_milli_by_node(pool_shape(atoms), {"m1/mig:3g.40gb@0"}) == [[(286, 286)]]
    assert free_milli_by_node(pool_shape(atoms), set()) == [[(429, 286, 286)]]


def test_two_free_small_mig_instances_are_fragments_for_a_task_of_their_sum() -> None:
    """Regression: free MIG instances were summed into one free share, so two free 2g.20gb (572
    milli) looked usable by a 3g.40gb task (429) that cannot be placed on them."""
    shape = pool_shape(mig_gpu("m1", "n1", ["3g.40gb", "2g.20gb", "2g.20gb"]))
    taken = {"m1/mig:3g.40gb@0"}
    assert pool_fragmentation(shape, taken, [(TaskShape(milli=429), 1.0)]) == 1.0
    assert pool_fragmentation(shape, taken, [(TaskShape(milli=286), 1.0)]) == 0.0
    # Half 3g, half 2g tasks: the 572 free is stranded half the time.
    assert pool_fragmentation(shape, taken, [(TaskShape(milli=429), 1.0), (TaskShape(milli=286), 1.0)]) == 0.5


def test_held_shapes_become_task_shapes() -> None:
    assert task_shape("gpu", Fraction(1), 2) == TaskShape(gpus=2)
    assert task_shape("gpu.slot", Fraction(1, 20), 3) == TaskShape(milli=150)
    assert task_shape("gpu.slot", Fraction(1, 4), 4) == TaskShape(gpus=1)  # every slot of a GPU
    assert task_shape("gpu.mig", Fraction(3, 7), 1) == TaskShape(milli=429)


def test_demand_weighs_each_shape_by_how_often_it_was_held_per_pool() -> None:
    held = [
        HeldShape("ts", "gpu.slot", Fraction(1, 4), 1, 3),
        HeldShape("ts", "gpu.slot", Fraction(1, 4), 2, 1),
        HeldShape("ex", "gpu", Fraction(1), 1, 5),
        HeldShape("ex", "gpu", Fraction(1), 1, 2),
    ]
    assert held_demand(held) == {
        "ts": [(TaskShape(milli=250), 3.0), (TaskShape(milli=500), 1.0)],
        "ex": [(TaskShape(gpus=1), 7.0)],
    }


def test_a_pool_with_no_history_is_measured_against_the_sizes_it_offers() -> None:
    atoms = [*mig_gpu("m1", "n1", ["3g.40gb", "1g.10gb"]), atom("w1", node="n2")]
    assert offered_demand(atoms) == [
        (TaskShape(milli=143), 1.0),
        (TaskShape(milli=429), 1.0),
        (TaskShape(gpus=1), 1.0),
    ]


def test_pool_fragmentation_by_hand() -> None:
    # Two 4-slot GPUs on one node: 1 slot free on each (250 + 250 = 500 free milli). Tasks of 2 slots
    # (500 milli) cannot use either GPU: all 500 free is a fragment for them; tasks of 1 slot can use
    # both. Demand: 1 slot three times, 2 slots once -> expected fragment 1/4 x 500 = 125 -> 0.25.
    atoms = slot_gpu("s1", "n1") + slot_gpu("s2", "n1")
    taken = {f"{g}/slot:{n}" for g in ("s1", "s2") for n in range(3)}
    demand = [(TaskShape(milli=250), 3.0), (TaskShape(milli=500), 1.0)]
    assert pool_fragmentation(pool_shape(atoms), taken, demand) == pytest.approx(0.25)
    # With no recorded demand: the pool's own size (one slot) uses every free slot.
    assert pool_fragmentation(pool_shape(atoms), taken, None) == 0.0
    # Nothing free: nothing fragmented.
    everything = {a.id for a in atoms}
    assert pool_fragmentation(pool_shape(atoms), everything, demand) == 0.0


def test_whole_gpu_tasks_cannot_use_a_partly_used_gpu() -> None:
    # A slot GPU with 3 of 4 slots free (750) beside a free one (1000): a 1-GPU task wants a wholly
    # free GPU, so the 750 is a fragment for it; a 1-slot task uses both. Half each: 375 / 1750.
    atoms = slot_gpu("s1", "n1") + slot_gpu("s2", "n1")
    demand = [(TaskShape(gpus=1), 1.0), (TaskShape(milli=250), 1.0)]
    assert pool_fragmentation(pool_shape(atoms), {"s1/slot:0"}, demand) == pytest.approx(375 / 1750)


def test_each_mig_instance_held_is_a_request_of_its_own() -> None:
    """Seven 1g.10gb instances held on one GPU are seven requests of 1/7 each, not one of a whole GPU
    (which no GPU cut all-1g.10gb could ever serve, so an idle pool would read as all fragments)."""
    held = [HeldShape("m", "gpu.mig", Fraction(1, 7), 7, 1), HeldShape("m", "gpu.mig", Fraction(3, 7), 1, 2)]
    assert held_demand(held) == {"m": [(TaskShape(milli=143), 7.0), (TaskShape(milli=429), 2.0)]}
