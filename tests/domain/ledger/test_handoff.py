"""The node's last line of defence: never a whole GPU and a part of it, or one atom, to two holders."""

from __future__ import annotations

from better_compute.domain.ledger.handoff import Held, refusals


def whole(allocation: str, gpu: str = "GPU-1") -> Held:
    return Held(allocation, f"{gpu}/gpu", gpu, whole=True)


def part(allocation: str, atom: str, gpu: str = "GPU-1") -> Held:
    return Held(allocation, atom, gpu, whole=False)


def test_a_part_is_refused_while_the_whole_gpu_is_held() -> None:
    assert refusals([whole("rsv-a")], [part("rsv-b", "mig:1")]) == {
        "rsv-b": "GPU-1 is held whole by rsv-a; a part of it cannot be handed over"
    }


def test_the_whole_gpu_is_refused_while_a_part_is_held() -> None:
    assert refusals([part("rsv-a", "mig:1")], [whole("rsv-b")]) == {
        "rsv-b": "a part of GPU-1 is held by rsv-a; the whole GPU cannot be handed over"
    }


def test_one_atom_is_never_handed_to_two_allocations() -> None:
    assert refusals([part("rsv-a", "mig:1")], [part("rsv-b", "mig:1")]) == {
        "rsv-b": "atom mig:1 is held by rsv-a"
    }


def test_parts_of_one_gpu_go_to_different_allocations_and_other_gpus_are_free() -> None:
    wanted = [part("rsv-b", "mig:2"), whole("rsv-c", gpu="GPU-2"), part("rsv-d", "slot:1", gpu="GPU-3")]
    assert refusals([part("rsv-a", "mig:1")], wanted) == {}


def test_of_two_new_allocations_that_clash_the_first_listed_is_served_whole() -> None:
    wanted = [
        whole("rsv-b"),
        part("rsv-b", "x", gpu="GPU-9"),
        part("rsv-c", "mig:1"),
        part("rsv-c", "y", gpu="GPU-8"),
    ]
    assert set(refusals([], wanted)) == {"rsv-c"}
    # rsv-c was refused whole: its atom on GPU-8 was not taken, so another allocation may have it.
    assert refusals([], [*wanted, part("rsv-d", "y", gpu="GPU-8")]).keys() == {"rsv-c"}


def test_an_allocation_holding_several_parts_of_its_own_gpu_is_no_clash() -> None:
    assert refusals([part("rsv-a", "mig:1")], [part("rsv-a", "mig:1"), part("rsv-a", "mig:2")]) == {}
