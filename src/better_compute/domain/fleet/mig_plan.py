"""What the node's mig-layout unit does to one GPU: nothing, repartition it, or change its MIG mode.

The control plane decides the layout; the node applies it only where that cuts no one: a GPU whose whole
is held (the GPU or a slot of it handed to a container) is left exactly as it is, whatever its layout,
and is planned again once the hold is gone. One whose MIG instances are held is re-cut around them when
its layout keeps every held instance where it is and needs no MIG mode change (`spares`: a node
restarted at another layout that still has the booked slice), and is otherwise left alone as well: a
held instance is never destroyed. An idle GPU is brought to its layout in the validator's placement
order (largest instances first, each at its explicit placement), destroying only what the new layout
does not keep: an instance already where the layout wants one stays, with its uuid. Turning MIG mode on
or off needs a GPU reset; the plan says so, and the node reports `reboot-required` when the reset fails.

`converged` is the one rule for "is this GPU, as reported, at the layout it is told": the node's daemon
reports a spec observed only once every GPU is, and the control plane keeps a GPU that is not out of
scheduling (its atoms `partitionPending`) until it is, so a booking never lands on atoms the node is
about to cut away.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from better_compute.domain.catalog import GpuModel, layouts, normalize_profile_name
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.kernel.errors import InvalidInput

Action = Literal["keep", "held", "repartition", "enable-mig", "disable-mig", "not-mig-capable"]


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """What to do to one GPU: `destroy` these GPU instances (by GI id), then `create` these, in order."""

    gpu_uuid: str
    action: Action
    destroy: tuple[int, ...] = ()
    create: tuple[layouts.PlacedInstance, ...] = ()
    reason: str = ""


def _key(profile: str, start: int, size: int) -> tuple[str, int, int]:
    return (normalize_profile_name(profile), start, size)


def plan_gpu(
    gpu: GpuReport, model: GpuModel, layout: str, held: bool, held_instances: Collection[int] = ()
) -> GpuPlan:
    """The plan for `gpu` (of `model`) to reach `layout`; `held`: the whole GPU or a slot of it is
    handed over; `held_instances`: the GPU instances (GI ids) handed over, which the plan keeps or,
    where it cannot (`spares`), leaves the GPU as it is."""
    wants_mig = layouts.enables_mig(layout)
    if held:
        return GpuPlan(
            gpu.uuid, "held", reason="a live hold is on the GPU; it keeps its layout until released"
        )
    if not spares(gpu, model, layout, held_instances):
        return GpuPlan(
            gpu.uuid,
            "held",
            reason="the layout would destroy an instance a live hold is on; the GPU keeps its layout"
            " until released",
        )
    if wants_mig and not model.mig_capable:
        return GpuPlan(gpu.uuid, "not-mig-capable", reason=f"{model.name} has no MIG")
    placement = layouts.placement_of(layout, model.id)
    if gpu.mig_mode_pending != wants_mig:
        action: Action = "enable-mig" if wants_mig else "disable-mig"
        return GpuPlan(gpu.uuid, action, reason="a MIG mode change takes effect at the GPU's reset")
    if not wants_mig:
        return GpuPlan(gpu.uuid, "keep")
    return plan_repartition(gpu, placement)


def plan_repartition(gpu: GpuReport, placement: layouts.InstancePlacement) -> GpuPlan:
    """What a GPU already in MIG mode destroys and creates to reach `placement`: an instance already
    where the placement wants one is kept (so is its uuid, and the atom it is)."""
    wanted = [_key(i.profile, i.start, i.size) for i in placement.instances]
    have: dict[tuple[str, int, int], MigInstance] = {
        _key(i.profile, i.placement_start, i.placement_size): i for i in gpu.mig_instances
    }
    kept = set(wanted) & set(have)
    destroy = tuple(sorted(i.gi_id for k, i in have.items() if k not in kept))
    create = tuple(i for i, k in zip(placement.instances, wanted, strict=True) if k not in kept)
    if not destroy and not create:
        return GpuPlan(gpu.uuid, "keep")
    return GpuPlan(gpu.uuid, "repartition", destroy=destroy, create=create)


def plan_node(
    gpus: Sequence[tuple[GpuReport, GpuModel]],
    layout_of: dict[str, str],
    held_gpus: set[str],
    held_instances: Mapping[str, Collection[int]] | None = None,
) -> list[GpuPlan]:
    """A plan per GPU of the node, for the GPUs the spec gives a layout (`layout_of`: uuid -> layout);
    `held_gpus` are held whole, `held_instances` some of their GPU instances (uuid -> GI ids)."""
    instances = held_instances or {}
    return [
        plan_gpu(gpu, model, layout_of[gpu.uuid], gpu.uuid in held_gpus, instances.get(gpu.uuid, ()))
        for gpu, model in gpus
        if gpu.uuid in layout_of
    ]


def spares(gpu: GpuReport, model: GpuModel | None, layout: str | None, instances: Collection[int]) -> bool:
    """Whether bringing `gpu` (of catalog `model`) to `layout` keeps each of these GPU instances (GI
    ids) where it is: the one rule for whether a held or booked MIG instance keeps its GPU from its
    layout, the node's mig-layout unit's (`plan_gpu`) and the control plane's (the node spec).

    It does when there is nothing to spare, nothing to do (no layout told, a GPU at its layout or
    without MIG), or a repartition that destroys none of them; not when the way there is a MIG mode
    change (its reset takes every instance), a layout the GPU's model cannot take, or a product the
    catalog here does not know: a node whose catalog does know it could re-cut it, so nothing here
    can say the instances would survive."""
    if not instances or layout is None:
        return True
    if model is None:
        return False
    if gpu.partition_pending:
        return False
    try:
        plan = plan_gpu(gpu, model, layout, held=False)
    except InvalidInput:
        return False
    if plan.action in ("keep", "not-mig-capable"):
        return True
    return plan.action == "repartition" and not set(plan.destroy) & set(instances)


def converged(gpu: GpuReport, model: GpuModel | None, layout: str | None) -> bool:
    """Whether `gpu` (of catalog `model`; None: a product the catalog does not know), as reported,
    is at `layout`, the MIG layout its node is told to give it (None: none, the node leaves the GPU
    as it is). It is when the mig-layout unit has nothing left to do to it (`plan_gpu` keeps it, or
    it has no MIG to split) and no MIG mode change waits for a reset. A layout the GPU's model
    cannot take (a profile it lacks) is never reached: the GPU is not converged."""
    if layout is None:
        return True
    if gpu.partition_pending:
        return False
    if model is None:
        return True  # the unit plans only GPUs the catalog knows; it leaves this one as it is
    try:
        plan = plan_gpu(gpu, model, layout, held=False)
    except InvalidInput:
        return False
    return plan.action in ("keep", "not-mig-capable")
