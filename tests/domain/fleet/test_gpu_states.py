"""A GPU's state history: a new period only when what decides its capacity changes."""

from __future__ import annotations

from fractions import Fraction

from better_compute.domain.fleet.gpu_states import GpuPeriod, GpuState, StateChange, plan_changes, state_of
from better_compute.domain.kernel.timewin import Window
from tests.builders import at, atom

HEALTHY = GpuState("g1", "n1", "p", True, False, (("g1/gpu", Fraction(1)),))


def test_the_state_of_a_gpu_holds_the_share_of_each_present_atom() -> None:
    atoms = [
        atom(key="gpu", bookable=False),
        atom(key="mig:1.0", attributes={"gpuModel": "H100-80GB", "migProfile": "3g.40gb"}),
        atom("g2", key="gpu"),
    ]
    s = state_of("g1", "n1", "p", True, False, atoms)
    assert s.share_of() == {"g1/gpu": Fraction(1), "g1/mig:1.0": Fraction(3, 7)}


def test_an_unchanged_gpu_writes_nothing_a_changed_one_a_new_period() -> None:
    current = {"g1": GpuPeriod(HEALTHY, Window(at(0)))}
    assert plan_changes(current, {"g1": HEALTHY}, at(1)) == []
    sick = GpuState("g1", "n1", "p", False, False, HEALTHY.shares)
    assert plan_changes(current, {"g1": sick}, at(1)) == [StateChange("g1", at(1), sick)]


def test_a_gpu_gone_closes_its_period_and_a_new_one_opens_one() -> None:
    assert plan_changes({"g1": GpuPeriod(HEALTHY, Window(at(0)))}, {"g1": None}, at(1)) == [
        StateChange("g1", at(1), None)
    ]
    assert plan_changes({}, {"g1": HEALTHY}, at(1)) == [StateChange("g1", at(1), HEALTHY)]
    assert plan_changes({}, {"g1": None}, at(1)) == []


def test_a_change_is_never_dated_before_the_period_it_closes() -> None:
    """A server whose clock is behind: the change takes effect when the open period began."""
    moved = GpuState("g1", "n1", None, True, False, HEALTHY.shares)
    assert plan_changes({"g1": GpuPeriod(HEALTHY, Window(at(2)))}, {"g1": moved}, at(1)) == [
        StateChange("g1", at(2), moved)
    ]
