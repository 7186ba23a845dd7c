"""Node reports become GPUs and atoms idempotently; nothing a booking points at is ever deleted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.inventory import NodeReport
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.errors import InvalidState, NotFound
from better_compute.domain.kernel.timewin import Window
from better_compute.service.fleet import inventory
from better_compute.service.hooks import Hooks
from better_compute.service.ledger import ledger
from better_compute.service.ops import fleet
from better_compute.storage.store import Store
from tests.builders import T0, at, fleet_spec, stored_events


@pytest.fixture
def node(store: Store) -> FakeNode:
    spec = fleet_spec(nodes=1, layout="mixed:3g.40gb+2x2g.20gb")
    fleet.register_fleet(store, spec, T0)
    fake = FakeNode.build("n", "H100-80GB", 2, nvlink=True)
    fake.apply_layout("mixed:3g.40gb+2x2g.20gb")
    return fake


def snapshot(store: Store) -> tuple[list[Gpu], list[Atom], int]:
    with store.read() as tx:
        gpus = tx.gpus.of_nodes(["n"])
        atoms = tx.atoms.of_nodes(["n"])
    return gpus, atoms, len(stored_events(store))


def mig_atoms(store: Store, **filters: object) -> list[Atom]:
    return inventory.list_atoms(store, limit=1000, **filters).items  # type: ignore[arg-type]


def test_reingesting_the_same_report_changes_nothing(store: Store, node: FakeNode) -> None:
    first = inventory.ingest(store, [node.report()], T0)
    assert first.gpus_written == 2 and first.atoms_written == 8
    before = snapshot(store)
    again = inventory.ingest(store, [node.report()], at(1))
    assert (again.gpus_written, again.atoms_written, again.changed_nodes) == (0, 0, [])
    assert snapshot(store) == before


def test_atoms_keep_their_ids_and_bookings_when_a_gpu_disappears(store: Store, node: FakeNode) -> None:
    inventory.ingest(store, [node.report()], T0)
    atom = mig_atoms(store, cls="gpu.mig", attributes={"migProfile": "3g.40gb"})[0]
    ledger.book(store, [atom.id], Window(at(0), at(4)), "r1", "acme", T0)
    gone = replace(node.report(), gpus=tuple(g for g in node.report().gpus if g.uuid != atom.gpu_id))
    inventory.ingest(store, [gone], at(1))
    with store.read() as tx:
        row = next((a for a in tx.atoms.of_nodes(["n"]) if a.id == atom.id), None)
        gpu = tx.gpus.get(atom.gpu_id)
        bookings = tx.ledger.allocation_bookings("r1")
    assert row is not None and gpu is not None
    assert not row.bookable and not gpu.present
    assert [b.atom_id for b in bookings] == [atom.id]
    with pytest.raises(InvalidState):
        ledger.book(store, [atom.id], Window(at(5), at(6)), "r2", "acme", T0)
    # It comes back with the same atom id.
    inventory.ingest(store, [node.report()], at(2))
    assert mig_atoms(store, cls="gpu.mig", attributes={"migProfile": "3g.40gb"})[0].id == atom.id
    ledger.book(store, [atom.id], Window(at(5), at(6)), "r2", "acme", T0)


def test_unhealthy_gpu_makes_its_atoms_unbookable(store: Store, node: FakeNode) -> None:
    node.gpus[0].healthy = False
    inventory.ingest(store, [node.report()], T0)
    sick = [a for a in mig_atoms(store) if a.gpu_id == node.gpus[0].uuid]
    well = [a for a in mig_atoms(store) if a.gpu_id == node.gpus[1].uuid]
    assert sick and not any(a.bookable for a in sick)
    assert sum(a.bookable for a in well) == 3


def test_pending_mig_mode_marks_every_atom(store: Store, node: FakeNode) -> None:
    node.gpus[1].mig_pending = False
    inventory.ingest(store, [node.report()], T0)
    pending = [a for a in mig_atoms(store) if a.gpu_id == node.gpus[1].uuid]
    assert pending and all(a.partition_pending and not a.bookable for a in pending)


def test_repartition_retires_old_instances_without_deleting_them(store: Store, node: FakeNode) -> None:
    node.apply_layout("all-1g.10gb")
    inventory.ingest(store, [node.report()], T0)
    old = {a.id for a in mig_atoms(store, cls="gpu.mig")}
    assert len(old) == 14
    node.apply_layout("mixed:4g.40gb+3x1g.10gb")
    inventory.ingest(store, [node.report()], at(1))
    listed = mig_atoms(store, cls="gpu.mig")
    assert len(listed) == 8
    assert sorted(a.attributes["migProfile"] for a in listed) == ["1g.10gb"] * 6 + ["4g.40gb"] * 2
    # Identity is GPU + slice (profile and placement): the 1g.10gb at placements 4 to 6, in both
    # layouts, keep their atom ids, whatever GPU-instance ids they have now.
    kept = {a.id for a in listed if a.attributes["migProfile"] == "1g.10gb"}
    assert kept <= old
    with store.read() as tx:
        stored = {a.id: a for a in tx.atoms.of_nodes(["n"])}
    retired = [stored[i] for i in old - kept]
    assert len(retired) == 8
    assert all(not a.present and not a.bookable for a in retired)


def test_unknown_node_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        inventory.ingest(store, [NodeReport("ghost")], T0)


@pytest.mark.parametrize("says_healthy", [False, True])
def test_a_gpu_whose_mig_state_is_unknown_keeps_its_last_atoms_and_loses_none(
    store: Store, node: FakeNode, monkeypatch: pytest.MonkeyPatch, says_healthy: bool
) -> None:
    """NVML refused the GPU's MIG mode (no permission, a reset required): its node reads it as MIG
    off with no instance, and says its MIG state is unknown. Taken at its word, every MIG atom of the
    GPU would be gone, and the endpoint copies on them moved; it is no word on them: each atom stays
    present (or absent) as it was, none is booked until the GPU reads whole, and none is lost."""
    lost: list[str] = []
    monkeypatch.setattr(Hooks, "atoms_lost", lambda self, atoms, now: lost.extend(a.id for a in atoms))
    node.apply_layout("all-1g.10gb")
    inventory.ingest(store, [node.report()], T0)
    node.apply_layout("mixed:3g.40gb+2x2g.20gb")
    inventory.ingest(store, [node.report()], at(1))
    gpu = node.gpus[0].uuid
    before = {a.id: a for a in snapshot(store)[1]}
    retired = {i for i, a in before.items() if a.gpu_id == gpu and not a.present}
    assert retired and any(a.bookable for a in before.values() if a.gpu_id == gpu)
    lost.clear()
    report = node.report()
    unread = replace(
        report,
        gpus=tuple(
            replace(
                g,
                healthy=says_healthy,
                mig_mode_current=False,
                mig_mode_pending=False,
                mig_instances=(),
                mig_state_unknown=True,
            )
            if g.uuid == gpu
            else g
            for g in report.gpus
        ),
    )
    inventory.ingest(store, [unread], at(2))
    during = {a.id: a for a in snapshot(store)[1]}
    assert lost == []
    assert {i: a.present for i, a in during.items()} == {i: a.present for i, a in before.items()}
    assert not any(a.bookable for a in during.values() if a.gpu_id == gpu)
    assert {i: a for i, a in during.items() if a.gpu_id != gpu} == {
        i: a for i, a in before.items() if a.gpu_id != gpu
    }
    with store.read() as tx:
        row = tx.gpus.get(gpu)
    assert row is not None and row.mig_mode_current and not row.healthy
    assert sorted(m.profile for m in row.mig_instances) == ["2g.20gb", "2g.20gb", "3g.40gb"]
    # Read whole again: the atoms are as they were, bookable, and none was ever lost.
    inventory.ingest(store, [report], at(3))
    assert {a.id: a for a in snapshot(store)[1]} == before
    assert lost == []
