"""The per-cluster scheduler's choice: best fit between groups, the closest run inside one, ties to
the smallest ids; a salt rotates only the ties, so two processes placing at once seldom pick the
same atoms and neither picks a worse set."""

from __future__ import annotations

from better_compute.domain.placement.binpack import choose_replicas
from better_compute.domain.placement.topology import FreeDevice


def node(name: str, gpus: int, nvlink: bool = True) -> list[FreeDevice]:
    return [
        FreeDevice(f"{name}-g{g}", name, f"{name}-gpu{g}", g // 4, f"{name}-nv" if nvlink else None)
        for g in range(gpus)
    ]


def test_the_fullest_node_that_fits_goes_first_and_ties_go_to_the_smallest_ids() -> None:
    free = node("a", 8) + node("b", 3) + node("c", 3)
    assert choose_replicas(free, 2, 1, None) == [("b-g0", "b-g1")]
    assert choose_replicas(free, 4, 1, None) == [("a-g0", "a-g1", "a-g2", "a-g3")]


def test_a_replica_keeps_to_one_numa_node_when_its_group_allows() -> None:
    free = [d for d in node("a", 8, nvlink=False) if d.atom_id not in {"a-g0", "a-g1"}]
    # a-g2, a-g3 (NUMA 0) and a-g4..a-g7 (NUMA 1): four on one NUMA node are a-g4..a-g7.
    assert choose_replicas(free, 4, 1, None) == [("a-g4", "a-g5", "a-g6", "a-g7")]


def test_a_salt_rotates_ties_and_keeps_the_choice_as_good() -> None:
    free = node("a", 8) + node("b", 8)
    picks = {choose_replicas(free, 1, 1, None, salt)[0] for salt in range(16)}
    assert len(picks) > 4  # different processes reach for different GPUs
    assert choose_replicas(free, 1, 1, None, 0) == [("a-g0",)]
    partly = node("a", 8) + node("b", 3)
    for salt in range(16):
        (chosen,) = choose_replicas(partly, 2, 1, None, salt)
        assert all(atom.startswith("b-") for atom in chosen)  # best fit is kept
    numa = [d for d in node("a", 8, nvlink=False) if d.atom_id not in {"a-g0", "a-g1"}]
    for salt in range(16):
        assert choose_replicas(numa, 4, 1, None, salt) == [("a-g4", "a-g5", "a-g6", "a-g7")]
