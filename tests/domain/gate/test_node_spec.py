"""`plan_spec`'s layouts: a GPU is told its node's layout, except one not at it while a booking holds
it or a part of it, now or later, which keeps the one it has (docs/concepts.md#atoms: a GPU is told a new
layout only through the gate)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet.atoms import Atom, derive_node_atoms
from better_compute.domain.fleet.inventory import GpuReport
from better_compute.domain.fleet.pools import PoolSettings
from better_compute.domain.fleet.records import Gpu, Pool
from better_compute.domain.gate.node_spec import LiveHold, NodeSpec, plan_spec
from better_compute.domain.ledger.ledger import partition_allocation_id
from tests.builders import T0

POOL = Pool("p1", "p1", "c1", "platform", "mig", PoolSettings(mig_layout="all-1g.10gb"), "gpu", 1, T0)
LATER = T0 + timedelta(days=1)


def _gpu(report: GpuReport) -> Gpu:
    return Gpu(
        report.uuid,
        "n1",
        report.index,
        report.product,
        "H100-80GB",
        report.memory_mib,
        report.numa_node,
        report.nvlink_peers,
        report.healthy,
        True,
        report.mig_mode_current,
        report.mig_mode_pending,
        report.mig_instances,
        T0,
    )


def _whole_node() -> tuple[list[Gpu], list[Atom]]:
    """Node n1 with two H100s reporting whole (a node re-imaged, or restarted at another layout)."""
    report = FakeNode.build("n1", "H100-80GB", 2).report()
    atoms = derive_node_atoms(report, lambda _: POOL.sharing, lambda _: "H100-80GB")
    return [_gpu(g) for g in report.gpus], [a for found in atoms.values() for a in found]


def _layouts(spec: NodeSpec) -> list[str | None]:
    return [g.mig_layout for g in spec.gpus]


def test_a_gpu_booked_later_whose_layout_is_not_its_pools_is_told_none_not_the_pools() -> None:
    gpus, atoms = _whole_node()
    parent = next(a for a in atoms if a.gpu_id == gpus[0].id and a.cls == "gpu")
    later = LiveHold("rsv-later", parent.id, LATER, LATER + timedelta(hours=4), "acme")
    spec = plan_spec("n1", gpus, POOL, atoms, [later], T0)
    # Repartitioning the first GPU would cut the booking away; the second, idle, is told the layout.
    assert _layouts(spec) == [None, "all-1g.10gb"]
    assert spec.assignments == ()  # the booking has not started: nothing is handed out yet
    assert _layouts(plan_spec("n1", gpus, POOL, atoms, [], T0)) == ["all-1g.10gb", "all-1g.10gb"]


def test_a_booking_not_handed_out_still_keeps_its_gpus_layout() -> None:
    gpus, atoms = _whole_node()
    parent = next(a for a in atoms if a.gpu_id == gpus[1].id and a.cls == "gpu")
    ending = LiveHold("dep-1/r0", parent.id, T0 - timedelta(hours=1), None, "acme")
    spec = plan_spec("n1", gpus, POOL, atoms, [], T0, bookings=[ending])  # a replica terminating
    assert _layouts(spec) == ["all-1g.10gb", None]


def test_the_gates_partition_holds_and_bookings_of_gone_atoms_do_not_keep_a_layout() -> None:
    gpus, atoms = _whole_node()
    first = [a for a in atoms if a.gpu_id == gpus[0].id]
    hold = partition_allocation_id(gpus[0].id, T0)
    holds = [LiveHold(hold, a.id, T0, None, None) for a in first]
    gone = replace(first[0], id="atm-gone", cls="gpu.mig", key="mig:1.0", present=False)
    lost = LiveHold("rsv-lost", gone.id, T0, LATER, "acme")  # its instance went with a restart
    spec = plan_spec("n1", gpus, POOL, [*atoms, gone], [*holds, lost], T0)
    assert _layouts(spec) == ["all-1g.10gb", "all-1g.10gb"]


def test_a_booked_gpu_already_at_its_layout_is_told_it() -> None:
    fake = FakeNode.build("n1", "H100-80GB", 1)
    fake.apply_layout("all-1g.10gb")
    report = fake.report()
    atoms = [
        a
        for found in derive_node_atoms(report, lambda _: POOL.sharing, lambda _: "H100-80GB").values()
        for a in found
    ]
    part = next(a for a in atoms if a.cls == "gpu.mig")
    spec = plan_spec(
        "n1", [_gpu(g) for g in report.gpus], POOL, atoms, [LiveHold("rsv-1", part.id, T0, LATER, "acme")], T0
    )
    assert _layouts(spec) == ["all-1g.10gb"]


EXCLUSIVE = Pool("p2", "p2", "c1", "platform", "mig", PoolSettings(mig_layout="all-disabled"), "gpu", 1, T0)


def test_a_whole_gpu_booking_does_not_keep_a_gpu_split_by_a_restart_from_its_layout() -> None:
    """A node restarted at a MIG layout (a re-imaged host) while its pool is whole: a tenant's booking
    of the whole GPU, later, is stranded on an unbookable parent while the GPU keeps the layout it
    came back with. Nothing of the split GPU is booked, so it is told its pool's layout, which
    gives the booking its GPU again; an instance booked itself would still keep it."""
    fake = FakeNode.build("n1", "H100-80GB", 1)
    fake.apply_layout("mixed:3g.40gb+2x2g.20gb")
    report = fake.report()
    atoms = [
        a
        for found in derive_node_atoms(report, lambda _: EXCLUSIVE.sharing, lambda _: "H100-80GB").values()
        for a in found
    ]
    gpus = [_gpu(g) for g in report.gpus]
    parent = next(a for a in atoms if a.cls == "gpu")
    whole = LiveHold("rsv-whole", parent.id, LATER, LATER + timedelta(hours=4), "acme")
    assert _layouts(plan_spec("n1", gpus, EXCLUSIVE, atoms, [whole], T0)) == ["all-disabled"]
    part = next(a for a in atoms if a.cls == "gpu.mig")
    held = LiveHold("rsv-part", part.id, T0, LATER, "acme")
    assert _layouts(plan_spec("n1", gpus, EXCLUSIVE, atoms, [whole, held], T0)) == [None]


def _split_node(layout: str) -> tuple[list[Gpu], list[Atom]]:
    """Node n1 with one H100 split at `layout` (a node restarted at a layout other than its pool's)."""
    fake = FakeNode.build("n1", "H100-80GB", 1)
    fake.apply_layout(layout)
    report = fake.report()
    atoms = derive_node_atoms(report, lambda _: POOL.sharing, lambda _: "H100-80GB")
    return [_gpu(g) for g in report.gpus], [a for found in atoms.values() for a in found]


def test_layout_returns_around_a_booked_slice_it_keeps() -> None:
    """A node restarted at `mixed:4g.40gb+3x1g.10gb` in an `all-1g.10gb` pool: its 1g.10gb at
    placement 4 is in both layouts and a tenant holds it. Going back to the pool's layout destroys
    only the 4g.40gb and creates the 1g.10gb slices around the booked one, so the GPU is told the
    pool's layout (its atoms take work again once it is there). A booking of the 4g.40gb, which
    the return would destroy, still keeps the GPU where it is, now or later."""
    gpus, atoms = _split_node("mixed:4g.40gb+3x1g.10gb")
    kept = next(a for a in atoms if a.key == "mig:1g.10gb@4")
    cut = next(a for a in atoms if a.key == "mig:4g.40gb@0")
    now = LiveHold("rsv-now", kept.id, T0 - timedelta(hours=1), LATER, "acme")
    later = LiveHold("rsv-later", kept.id, LATER, LATER + timedelta(hours=4), "globex")
    spec = plan_spec("n1", gpus, POOL, atoms, [now, later], T0)
    assert _layouts(spec) == ["all-1g.10gb"]
    assert [a.atoms for a in spec.assignments] == [(kept.id,)]  # its tenant keeps its slice throughout
    big = LiveHold("rsv-big", cut.id, LATER, LATER + timedelta(hours=4), "acme")
    assert _layouts(plan_spec("n1", gpus, POOL, atoms, [now, big], T0)) == [None]
    # A return that turns MIG off destroys every slice: a booked one keeps the GPU as it is.
    assert _layouts(plan_spec("n1", gpus, EXCLUSIVE, atoms, [now], T0)) == [None]


def test_booked_slice_on_a_gpu_whose_model_the_server_does_not_know_keeps_its_layout() -> None:
    """A server whose catalog lacks the GPU's product cannot tell whether its pool's layout keeps a
    booked slice, while the node's catalog may know it and re-cut the GPU: the GPU keeps its layout."""
    gpus, atoms = _split_node("mixed:4g.40gb+3x1g.10gb")
    cut = next(a for a in atoms if a.key == "mig:4g.40gb@0")
    later = T0 + timedelta(hours=2)
    big = LiveHold("rsv-big", cut.id, later, later + timedelta(hours=4), "acme")
    assert _layouts(plan_spec("n1", gpus, POOL, atoms, [big], T0)) == [None]
    unknown = [replace(g, model=None) for g in gpus]
    assert _layouts(plan_spec("n1", unknown, POOL, atoms, [big], T0)) == [None]
