"""The state of each atom behind `better_compute_atoms`."""

from __future__ import annotations

from better_compute.domain.ledger.ledger import is_partition_change, partition_allocation_id
from better_compute.domain.metering.census import ATOM_STATES, atom_census, atom_state
from tests.builders import T0, atom


def test_each_atom_is_in_exactly_the_state_its_holder_and_gpu_give_it() -> None:
    whole = atom("g1")
    assert atom_state(whole, None, split=False) == "free"
    assert atom_state(whole, "rsv-1", split=False) == "booked"
    assert atom_state(whole, partition_allocation_id("g1", T0), split=False) == "changing"
    assert atom_state(atom("g1", partition_pending=True, bookable=False), None, split=False) == "changing"
    parent = atom("g2", bookable=False)
    assert atom_state(parent, None, split=True) == "parent"
    assert atom_state(parent, None, split=False) == "unavailable"  # an unhealthy whole GPU
    assert atom_state(atom("g2", "mig:1.0", bookable=False), None, split=True) == "unavailable"


def test_the_census_counts_every_state_of_every_pool_and_class_zeros_included() -> None:
    atoms = [
        atom("g1", bookable=False),
        atom("g1", "mig:1.0"),
        atom("g1", "mig:2.0"),
        atom("g2", pool_id="q"),
    ]
    census = atom_census(atoms, {"g1/mig:2.0": "rsv-1"})
    assert census[("p", "gpu", "parent")] == 1
    assert census[("p", "gpu.mig", "free")] == 1 and census[("p", "gpu.mig", "booked")] == 1
    assert census[("q", "gpu", "free")] == 1
    assert {k for k in census if k[:2] == ("q", "gpu")} == {("q", "gpu", s) for s in ATOM_STATES}
    assert sum(census.values()) == len(atoms)


def test_partition_changes_are_told_from_reservations_by_their_allocation_id() -> None:
    assert is_partition_change(partition_allocation_id("GPU-1", T0))
    assert not is_partition_change("rsv-0001")
