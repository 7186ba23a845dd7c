"""A deployment's phase (seed 001, "Admission phases"): with a container, `placed` needs every replica
booked and its container created, `running` one ready replica; without one, bound is running."""

from __future__ import annotations

from datetime import timedelta

from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.domain.placement.workloads import Containers, containers_of, phase_of, problems_of
from tests.builders import T0


def test_without_a_container_a_bound_replica_is_running() -> None:
    assert phase_of(2, 2, 0, False) == "placed"
    assert phase_of(2, 1, 1, False) == "running"
    assert phase_of(2, 1, 0, True) == "pending"
    assert phase_of(2, 1, 0, False) == "admitted"


def test_with_a_container_placed_needs_every_container_created_and_running_one_ready() -> None:
    assert phase_of(2, 2, 2, False, Containers(existing=1, ready=0)) == "admitted"  # bound is not running
    assert phase_of(2, 2, 0, False, Containers(existing=2, ready=0)) == "placed"
    assert phase_of(2, 2, 0, False, Containers(existing=2, ready=1)) == "running"
    assert phase_of(3, 2, 0, True, Containers(existing=2, ready=0)) == "pending"
    assert phase_of(3, 2, 0, True, Containers(existing=2, ready=1)) == "running"


def test_a_replicas_latest_word_counts_and_problems_are_listed_in_replica_order_bounded() -> None:
    old = ReplicaState("d.r0", "n-1", "ready", T0)
    new = ReplicaState("d.r0", "n-1", "exited", T0 + timedelta(seconds=1), exit_code=1)
    states = {
        "d.r0": [old, new],
        "d.r1": [ReplicaState("d.r1", "n-2", "ready", T0)],
        "d.r2": [ReplicaState("d.r2", "n-2", "removed", T0)],
    }
    assert containers_of(["d.r0", "d.r1", "d.r2", "d.r3"], states, {"n-1", "n-2"}) == Containers(
        existing=2, ready=1
    )
    crash = {
        f"d.r{i}": [ReplicaState(f"d.r{i}", "n-1", "exited", T0, 1, "crash-looping", restarts=i)]
        for i in range(30)
    }
    listed = problems_of([f"d.r{i}" for i in range(30)], crash)
    assert [s.allocation_id for s in listed] == [f"d.r{i}" for i in range(20)]
