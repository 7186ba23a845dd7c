"""Fragmentation (Weng et al., ATC '23): the expected free GPU capacity the request sizes cannot use,
with small cases worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.placement.fragmentation import (
    TaskShape,
    fragmentation_delta,
    fragmentation_share,
    node_fragmentation,
    task_fragmentation,
)

WHOLE_1 = TaskShape(gpus=1)
HALF = TaskShape(milli=500)


def test_a_partly_used_gpu_is_a_fragment_for_a_whole_gpu_task() -> None:
    # Two wholly free GPUs serve a 1-GPU task; the 300 left on the third cannot.
    assert node_fragmentation([1000, 1000, 300], [(WHOLE_1, 1.0)]) == 300


def test_a_node_that_cannot_run_the_task_is_all_fragment() -> None:
    # Three whole GPUs wanted, two wholly free: nothing of 2,300 free milli can serve it.
    assert node_fragmentation([1000, 1000, 300], [(TaskShape(gpus=3), 1.0)]) == 2300


def test_a_share_is_blocked_only_by_gpus_with_less_than_it_free() -> None:
    assert node_fragmentation([1000, 1000, 300], [(HALF, 1.0)]) == 300
    assert node_fragmentation([1000, 1000, 300], [(TaskShape(milli=200), 1.0)]) == 0
    # No GPU has 500 free: the node cannot run it, so all 700 free are fragments.
    assert node_fragmentation([400, 300, 0], [(HALF, 1.0)]) == 700


def test_the_expectation_weighs_shapes_by_popularity_normalised() -> None:
    # [1000, 600, 200]: a whole GPU leaves 800 unusable, a half GPU 200; equal weights: 500.
    assert node_fragmentation([1000, 600, 200], [(WHOLE_1, 1.0), (HALF, 1.0)]) == 500
    # Weights 3:1 (given as counts, not fractions): (3 * 800 + 200) / 4 = 650.
    assert node_fragmentation([1000, 600, 200], [(WHOLE_1, 3.0), (HALF, 1.0)]) == 650


def test_the_fleet_share_is_fragments_over_free_capacity() -> None:
    nodes = [[1000, 600, 200], [0, 0], [1000, 1000]]
    # 500 + 0 + (whole: 0, half: 0) over 3,800 free.
    assert fragmentation_share(nodes, [(WHOLE_1, 1.0), (HALF, 1.0)]) == pytest.approx(500 / 3800)


def test_nothing_free_or_no_demand_is_no_fragmentation() -> None:
    assert fragmentation_share([[0, 0], []], [(WHOLE_1, 1.0)]) == 0.0
    assert node_fragmentation([500], []) == 0.0
    assert fragmentation_share([[500]], [(HALF, 0.0)]) == 0.0


def test_the_gradient_is_the_growth_of_fragmentation_of_one_placement() -> None:
    # A 300-milli share on a GPU with 500 free leaves 200 no half can use; on the free GPU it leaves
    # 700, which still serves a half: here the gradient is lower on the free GPU.
    demand = [(HALF, 1.0)]
    assert fragmentation_delta([1000, 500], [1], 300, demand) == 200
    assert fragmentation_delta([1000, 500], [0], 300, demand) == 0


@pytest.mark.parametrize(("gpus", "milli"), [(0, 0), (0, 1000), (-1, 0), (2, 500), (0, -5)], ids=str)
def test_a_shape_that_asks_for_nothing_or_both_is_refused(gpus: int, milli: int) -> None:
    with pytest.raises(ValueError, match="task"):
        TaskShape(gpus=gpus, milli=milli)


shapes = st.one_of(
    st.builds(TaskShape, gpus=st.integers(1, 8)),
    st.builds(TaskShape, milli=st.integers(1, 999)),
)
gpu_free = st.lists(st.integers(0, 1000), max_size=8)


@given(gpu_free, st.lists(st.tuples(shapes, st.floats(0.0, 10.0)), max_size=5))
def test_fragmentation_is_between_nothing_and_all_the_free_capacity(
    free: list[int], demand: list[tuple[TaskShape, float]]
) -> None:
    value = node_fragmentation(free, demand)
    assert -1e-9 <= value <= sum(free) + 1e-9
    assert 0.0 <= fragmentation_share([free], demand) <= 1.0 + 1e-12


@given(st.integers(1, 8), st.integers(1, 8))
def test_wholly_free_gpus_are_no_fragment_for_a_task_that_fits(have: int, want: int) -> None:
    expected = 0 if want <= have else have * 1000
    assert task_fragmentation([1000] * have, TaskShape(gpus=want)) == expected


def test_a_node_of_a_model_the_task_does_not_run_on_is_all_fragment_for_it() -> None:
    t4_only = TaskShape(milli=500, models=("T4",))
    # On a T4 node the half fits on the free GPU: only the 300 left elsewhere is a fragment.
    assert node_fragmentation([1000, 300], [(t4_only, 1.0)], model="T4") == 300
    # On a P100 node it cannot run at all: all 1,300 free.
    assert node_fragmentation([1000, 300], [(t4_only, 1.0)], model="P100") == 1300
    # With equal weight on an unconstrained whole GPU (300 unusable): (1300 + 300) / 2 on the P100.
    assert node_fragmentation([1000, 300], [(t4_only, 1.0), (WHOLE_1, 1.0)], model="P100") == 800
    # A node of no given model is taken as one every shape may run on.
    assert node_fragmentation([1000, 300], [(t4_only, 1.0)]) == 300
    assert fragmentation_share([[1000, 300], [1000, 300]], [(t4_only, 1.0)], ["T4", "P100"]) == pytest.approx(
        1600 / 2600
    )


def test_a_mig_gpus_free_instances_are_pieces_each_usable_only_whole() -> None:
    """Seven free 1g instances of an H100 (143 each) are 1001 milli free, but no whole-GPU task and
    no 2g task (286) can use any of them; a free 7g instance is a wholly free GPU."""
    ones = tuple([143] * 7)
    assert task_fragmentation([ones], TaskShape(gpus=1)) == 1001
    assert task_fragmentation([ones], TaskShape(milli=286)) == 1001
    assert task_fragmentation([ones], TaskShape(milli=143)) == 0
    assert task_fragmentation([(1000,)], TaskShape(gpus=1)) == 0
    # A 3g and a 1g free beside a plain GPU with 500 free: a 2g task can use the 3g and the 500, the
    # 1g is a fragment for it.
    assert task_fragmentation([(429, 143), 500], TaskShape(milli=286)) == 143
    assert fragmentation_share([[(429, 143), 500]], [(TaskShape(milli=286), 1.0)]) == 143 / 1072
