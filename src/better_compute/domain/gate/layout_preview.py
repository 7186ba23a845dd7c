"""What a pool's MIG layout change would do, node by node, without doing it (`pools.previewLayout`).

The MIG layout gate (docs/concepts.md#changing-a-pools-layout-the-gate) grants a node its new layout at the
end of the node's last live booking, so a node is grantable now when nothing of it is booked at or after now,
at that end otherwise, and never while an open-ended booking holds it. A node that does not take its layout
from the pool (`carries_pool_layout` false) keeps its instances: nothing appears or disappears
there and its capacity is the same before and after.

Atoms that disappear are the atoms of the instances the node would destroy (`mig_plan`: an
instance already where the new placement wants one stays, with its uuid and its atom). Atoms that
would appear have no id yet: an atom id derives from the instance's GI and CI ids, which the driver
picks when it creates the instance, so they are described by GPU, profile and placement instead.

Capacity counts instances per MIG profile over the pool's present GPUs; a GPU that is not split
counts once under `gpu`. A partition change's own holds (`partition:` allocations) are no tenant's:
they neither delay the grant nor appear among the holders, and are listed on their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain import catalog
from better_compute.domain.catalog import layouts, normalize_profile_name, profile_name_key
from better_compute.domain.fleet import mig_plan
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.ledger.ledger import is_partition_change

WHOLE = "gpu"
"""The capacity key of a GPU that is not split into MIG instances."""


@dataclass(frozen=True, slots=True)
class NodeBooking:
    """A live booking on one of the node's atoms, as the ledger has it."""

    allocation_id: str
    gpu_id: str
    tenant_id: str | None
    starts_at: datetime
    ends_at: datetime | None


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the preview needs of one member node: its flag, its GPUs as reported, its live bookings."""

    node: str
    carries_pool_layout: bool
    gpus: tuple[Gpu, ...]
    bookings: tuple[NodeBooking, ...] = ()
    layout: str | None = None
    """The layout the node is told now (`mig_gate.told_layout`: its frozen one while a change waits)."""
    change_state: str | None = None
    """The state of the node's layout change under way (`pending`, `scheduled`, `granted`), if any."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A tenant's allocation that holds the node back; `ends_at` None: it never ends."""

    allocation_id: str
    tenant_id: str | None
    ends_at: datetime | None


@dataclass(frozen=True, slots=True)
class ChangeHold:
    """A partition change's hold on one GPU (the gate's own booking, no tenant's)."""

    allocation_id: str
    gpu_id: str
    starts_at: datetime
    ends_at: datetime | None


@dataclass(frozen=True, slots=True)
class AppearingInstance:
    """A MIG instance the node would create: on which GPU, of which profile, where on the axis."""

    gpu_id: str
    mig_profile: str
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class NodePreview:
    node: str
    carries_pool_layout: bool
    layout: str | None
    change_state: str | None
    grantable_at: datetime | None
    """When the gate could grant the new layout: now, the end of the last live booking, or None."""
    held_open_ended: bool
    """A live booking that never ends holds the node: it is never grantable while that lasts."""
    held_by: tuple[Holder, ...]
    change_holds: tuple[ChangeHold, ...]
    disappear: tuple[str, ...]
    appear: tuple[AppearingInstance, ...]
    before: Mapping[str, int]
    after: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class LayoutPreview:
    pool_id: str
    from_layout: str
    to_layout: str
    at: datetime
    nodes: tuple[NodePreview, ...]
    before: Mapping[str, int]
    after: Mapping[str, int]


def _capacity_key(name: str) -> tuple[int, tuple[int, int, str]]:
    return (0, (0, 0, "")) if name == WHOLE else (1, profile_name_key(name))


def _counted(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in items:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _aligned(*maps: Mapping[str, int]) -> list[dict[str, int]]:
    """The maps over the union of their keys (absent ones 0), `gpu` first, then largest profile."""
    keys = sorted({k for m in maps for k in m}, key=_capacity_key)
    return [{k: m.get(k, 0) for k in keys} for m in maps]


def _current(gpu: Gpu) -> list[str]:
    if not gpu.mig_mode_current:
        return [WHOLE]
    return [normalize_profile_name(i.profile) for i in gpu.mig_instances]


def _gpu_change(gpu: Gpu, to_layout: str) -> tuple[list[str], list[AppearingInstance], list[str]]:
    """(atoms that disappear, instances that appear, capacity after) for one present GPU."""
    target = layouts.parse_layout(to_layout)
    model = catalog.find_model(gpu.model) if gpu.model else None
    if model is None or (target.mig_enabled and not model.mig_capable):
        # The layout was checked on every model (check_layout_fits): such a GPU can only stay as it is.
        return [], [], _current(gpu)
    if not target.mig_enabled:
        gone = [atom_id_for(gpu.id, mig_atom_key(i)) for i in gpu.mig_instances]
        return (gone if gpu.mig_mode_current else []), [], [WHOLE]
    placement = layouts.validate(target, model)
    if gpu.mig_mode_current:
        plan = mig_plan.plan_repartition(gpu.report(), placement)
        destroyed = set(plan.destroy)
        created: Sequence[layouts.PlacedInstance] = plan.create
        gone = [
            atom_id_for(gpu.id, mig_atom_key(i))
            for i in sorted(gpu.mig_instances, key=lambda i: (i.gi_id, i.ci_id))
            if i.gi_id in destroyed
        ]
    else:
        created, gone = placement.instances, []
    appear = [AppearingInstance(gpu.id, i.profile, i.start, i.size) for i in created]
    return gone, appear, [normalize_profile_name(i.profile) for i in placement.instances]


def _holders(bookings: Iterable[NodeBooking]) -> list[Holder]:
    ends: dict[str, datetime | None] = {}
    tenants: dict[str, str | None] = {}
    for b in bookings:
        if b.allocation_id in ends:
            known = ends[b.allocation_id]
            ends[b.allocation_id] = None if known is None or b.ends_at is None else max(known, b.ends_at)
        else:
            ends[b.allocation_id] = b.ends_at
            tenants[b.allocation_id] = b.tenant_id
    closing = sorted(
        (Holder(a, tenants[a], end) for a, end in ends.items() if end is not None),
        key=lambda h: (h.ends_at, h.allocation_id),
    )
    never = sorted(
        (Holder(a, tenants[a], None) for a, end in ends.items() if end is None), key=lambda h: h.allocation_id
    )
    return closing + never


def plan_node_preview(state: NodeState, to_layout: str, now: datetime) -> NodePreview:
    """The preview of one node: when it could be granted `to_layout`, who holds it, what changes."""
    live = [b for b in state.bookings if b.ends_at is None or b.ends_at > now]
    tenants = [b for b in live if not is_partition_change(b.allocation_id)]
    # A partition change books every atom of its GPU's family: one entry per change, not per atom.
    holds = sorted(
        {
            b.allocation_id: ChangeHold(b.allocation_id, b.gpu_id, b.starts_at, b.ends_at)
            for b in live
            if is_partition_change(b.allocation_id)
        }.values(),
        key=lambda h: (h.gpu_id, h.starts_at, h.allocation_id),
    )
    held_by = _holders(tenants)
    open_ended = any(h.ends_at is None for h in held_by)
    ends = [h.ends_at for h in held_by if h.ends_at is not None]
    grantable = None if open_ended else max([now, *ends])
    disappear: list[str] = []
    appear: list[AppearingInstance] = []
    before: list[str] = []
    after: list[str] = []
    for gpu in sorted(state.gpus, key=lambda g: (g.index, g.id)):
        if not gpu.present:
            continue
        current = _current(gpu)
        before += current
        if not state.carries_pool_layout:
            after += current
            continue
        gone, new, counted = _gpu_change(gpu, to_layout)
        disappear += gone
        appear += new
        after += counted
    shown_before, shown_after = _aligned(_counted(before), _counted(after))
    return NodePreview(
        node=state.node,
        carries_pool_layout=state.carries_pool_layout,
        layout=state.layout,
        change_state=state.change_state,
        grantable_at=grantable,
        held_open_ended=open_ended,
        held_by=tuple(held_by),
        change_holds=tuple(holds),
        disappear=tuple(disappear),
        appear=tuple(appear),
        before=shown_before,
        after=shown_after,
    )


def _summed(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in maps:
        for k, v in m.items():
            total[k] = total.get(k, 0) + v
    return total


def plan_layout_preview(
    pool_id: str, from_layout: str, to_layout: str, nodes: Sequence[NodeState], now: datetime
) -> LayoutPreview:
    """The whole preview: one `NodePreview` per member node (by node id) and the pool's capacity by
    profile before and after. `to_layout` must already have been checked on the nodes' GPU models
    (`pools.check_layout_fits`); this decides nothing about validity."""
    previews = tuple(plan_node_preview(n, to_layout, now) for n in sorted(nodes, key=lambda n: n.node))
    before, after = _aligned(_summed(p.before for p in previews), _summed(p.after for p in previews))
    return LayoutPreview(
        pool_id=pool_id,
        from_layout=from_layout,
        to_layout=to_layout,
        at=now,
        nodes=previews,
        before=before,
        after=after,
    )
