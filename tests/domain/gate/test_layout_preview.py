"""The layout preview planner (domain.gate.layout_preview): when a node could be granted a new layout, who
holds it back, what disappears and appears, and the capacity by profile before and after."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from better_compute.domain.catalog import layouts
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.domain.fleet.inventory import MigInstance
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.gate.layout_preview import (
    AppearingInstance,
    ChangeHold,
    Holder,
    NodeBooking,
    NodeState,
    plan_layout_preview,
    plan_node_preview,
)
from better_compute.domain.ledger.ledger import partition_allocation_id
from tests.builders import T0, at

MIXED = "mixed:3g.40gb+2x2g.20gb"


def gpu(uuid: str, layout: str | None = "all-1g.10gb", node: str = "n-1", index: int = 0) -> Gpu:
    """An H100-80GB as reported, split by `layout` (None: MIG off), GI ids from 1 in creation order."""
    instances: tuple[MigInstance, ...] = ()
    if layout is not None:
        placed = layouts.validate(layout, "H100-80GB").instances
        instances = tuple(
            MigInstance(p.profile, gi, 0, p.start, p.size, f"MIG-{uuid}-{gi}")
            for gi, p in enumerate(placed, start=1)
        )
    return Gpu(
        id=uuid,
        node_id=node,
        index=index,
        product="NVIDIA H100 80GB HBM3",
        model="H100-80GB",
        memory_mib=81559,
        numa_node=0,
        nvlink_peers=(),
        healthy=True,
        present=True,
        mig_mode_current=layout is not None,
        mig_mode_pending=layout is not None,
        mig_instances=instances,
        updated_at=T0,
    )


def booking(allocation: str, gpu_id: str, end: datetime | None, tenant: str | None = "acme") -> NodeBooking:
    return NodeBooking(allocation, gpu_id, tenant, T0, end)


def node(
    *gpus: Gpu, bookings: tuple[NodeBooking, ...] = (), carries: bool = True, name: str = "n-1"
) -> NodeState:
    return NodeState(name, carries, gpus, bookings)


def test_an_idle_node_is_grantable_now() -> None:
    preview = plan_node_preview(node(gpu("g1")), MIXED, T0)
    assert preview.grantable_at == T0
    assert preview.held_by == () and not preview.held_open_ended


def test_a_booking_ending_later_sets_grantable_at_to_its_end_and_is_listed() -> None:
    bookings = (
        booking("rsv-1", "g1", at(3)),
        booking("rsv-1", "g1", at(5)),
        booking("rsv-2", "g2", at(2), tenant="beta"),
        booking("rsv-old", "g1", at(-1)),  # over: it holds nothing back
    )
    preview = plan_node_preview(node(gpu("g1"), gpu("g2", index=1), bookings=bookings), MIXED, T0)
    assert preview.grantable_at == at(5)
    assert preview.held_by == (Holder("rsv-2", "beta", at(2)), Holder("rsv-1", "acme", at(5)))


def test_an_open_ended_booking_makes_the_node_never_grantable_while_it_lasts() -> None:
    bookings = (booking("rsv-1", "g1", at(5)), booking("rsv-forever", "g1", None))
    preview = plan_node_preview(node(gpu("g1"), bookings=bookings), MIXED, T0)
    assert preview.grantable_at is None and preview.held_open_ended
    assert preview.held_by == (Holder("rsv-1", "acme", at(5)), Holder("rsv-forever", "acme", None))


def test_a_partition_changes_own_hold_is_listed_apart_and_delays_nothing() -> None:
    change = partition_allocation_id("g1", T0)
    family = (booking(change, "g1", None, tenant=None),) * 8  # the parent and its seven instances
    preview = plan_node_preview(node(gpu("g1"), bookings=family), MIXED, T0)
    assert preview.grantable_at == T0 and not preview.held_open_ended
    assert preview.held_by == ()
    assert preview.change_holds == (ChangeHold(change, "g1", T0, None),)


def test_all_1g_to_mixed_on_h100_destroys_every_small_instance_and_places_the_new_ones() -> None:
    current = gpu("g1")
    preview = plan_node_preview(node(current), MIXED, T0)
    assert preview.disappear == tuple(atom_id_for("g1", mig_atom_key(i)) for i in current.mig_instances)
    assert preview.appear == (
        AppearingInstance("g1", "3g.40gb", 4, 4),
        AppearingInstance("g1", "2g.20gb", 0, 2),
        AppearingInstance("g1", "2g.20gb", 2, 2),
    )


def test_capacity_before_and_after_for_all_1g_to_mixed_on_h100() -> None:
    nodes = [node(gpu("g1"), gpu("g2", index=1)), node(gpu("g3", node="n-2"), name="n-2")]
    preview = plan_layout_preview("p1", "all-1g.10gb", MIXED, nodes, T0)
    assert dict(preview.before) == {"3g.40gb": 0, "2g.20gb": 0, "1g.10gb": 21}
    assert dict(preview.after) == {"3g.40gb": 3, "2g.20gb": 6, "1g.10gb": 0}
    per_gpu = plan_node_preview(node(gpu("g1")), MIXED, T0)
    assert dict(per_gpu.before) == {"3g.40gb": 0, "2g.20gb": 0, "1g.10gb": 7}
    assert dict(per_gpu.after) == {"3g.40gb": 1, "2g.20gb": 2, "1g.10gb": 0}
    assert [n.node for n in preview.nodes] == ["n-1", "n-2"]
    assert (preview.from_layout, preview.to_layout, preview.at) == ("all-1g.10gb", MIXED, T0)


def test_a_node_that_keeps_its_own_layout_changes_nothing() -> None:
    kept = node(gpu("g1"), bookings=(booking("rsv-1", "g1", at(2)),), carries=False)
    preview = plan_node_preview(kept, MIXED, T0)
    assert not preview.carries_pool_layout
    assert preview.disappear == () and preview.appear == ()
    assert dict(preview.before) == dict(preview.after) == {"1g.10gb": 7}
    assert preview.grantable_at == at(2)


def test_an_instance_already_in_place_stays_with_its_atom() -> None:
    current = gpu("g1", layout=MIXED)
    preview = plan_node_preview(node(current), "mixed:3g.40gb+4x1g.10gb", T0)
    three = next(i for i in current.mig_instances if i.profile == "3g.40gb")
    assert atom_id_for("g1", mig_atom_key(three)) not in preview.disappear
    assert len(preview.disappear) == 2
    assert [i.mig_profile for i in preview.appear] == ["1g.10gb"] * 4
    assert dict(preview.after) == {"3g.40gb": 1, "2g.20gb": 0, "1g.10gb": 4}


def test_whole_gpus_count_under_gpu_when_mig_turns_on_or_off() -> None:
    on = plan_node_preview(node(gpu("g1", layout=None)), MIXED, T0)
    assert on.disappear == () and len(on.appear) == 3
    assert dict(on.before) == {"gpu": 1, "3g.40gb": 0, "2g.20gb": 0}
    assert dict(on.after) == {"gpu": 0, "3g.40gb": 1, "2g.20gb": 2}
    off = plan_node_preview(node(gpu("g1")), "all-disabled", T0)
    assert len(off.disappear) == 7 and off.appear == ()
    assert dict(off.after) == {"gpu": 1, "1g.10gb": 0}


def test_a_gpu_no_longer_present_is_left_out() -> None:
    gone = replace(gpu("g2", index=1), present=False)
    preview = plan_node_preview(node(gpu("g1"), gone), MIXED, T0)
    assert dict(preview.before) == {"3g.40gb": 0, "2g.20gb": 0, "1g.10gb": 7}
    assert all(i.gpu_id == "g1" for i in preview.appear)
