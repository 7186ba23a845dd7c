"""What the console draws (docs/console.md#fleet-consolefleet): each GPU as a bar of its placement units with
every piece at its real start and width, and each piece's state and holder.

A MIG instance sits where the GPU placed it (`placement_start`, `placement_size` as NVML reports
them, on the model's placement axis: a 3g.40gb on an H100 spans 4 of 8 units); time-slice and MPS
slots are equal cells; a whole GPU is one cell. A piece is `changing` while a layout change holds
its node or its GPU waits for a MIG mode change (its pending mode differs from its current one),
`unhealthy` when its GPU is, `booked` while a booking holds it now (a tenant's, an endpoint's or a
layout change's), and `free` otherwise. The
holder is named to the admin and to the holder's own tenant; anyone else sees that it is taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from better_compute.domain.catalog import find_model
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.records import Gpu

__all__ = ["STATES", "Cell", "GpuBar", "Holder", "gpu_bar"]

STATES = ("free", "booked", "changing", "unhealthy")
"""A drawn piece's states, each with its own colour."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds an atom now: the allocation (a reservation, deployment, endpoint or layout change)
    and its tenant (None: the fleet's own, such as an endpoint's or a layout change's hold)."""

    allocation_id: str
    tenant_id: str | None


@dataclass(frozen=True, slots=True)
class Cell:
    """One piece of a GPU at `start` for `size` of the bar's units."""

    atom_id: str
    label: str
    start: int
    size: int
    state: str
    holder: str | None
    """What hovering shows: the allocation and tenant, `taken` when the viewer may not know."""

    def left_percent(self, units: int) -> str:
        return _percent(Fraction(self.start, units))

    def width_percent(self, units: int) -> str:
        return _percent(Fraction(self.size, units))


def _percent(share: Fraction) -> str:
    """A CSS percentage with 4 decimals: exact enough for any bar, and stable text."""
    return f"{float(share * 100):.4f}%"


@dataclass(frozen=True, slots=True)
class GpuBar:
    gpu_id: str
    index: int
    model: str
    units: int
    mode: str
    """`mig`, `slots` or `whole`."""
    cells: tuple[Cell, ...]


def _holder(holders: Sequence[Holder], viewer: str | None, is_admin: bool) -> str | None:
    if not holders:
        return None
    shown = []
    for h in holders:
        if is_admin or (h.tenant_id is not None and h.tenant_id == viewer):
            shown.append(h.allocation_id + (f" ({h.tenant_id})" if h.tenant_id else ""))
        else:
            shown.append("taken")
    return ", ".join(sorted(set(shown)))


def gpu_bar(
    gpu: Gpu,
    atoms: Sequence[Atom],
    holders: Mapping[str, Sequence[Holder]],
    *,
    changing: bool,
    viewer: str | None,
    is_admin: bool,
) -> GpuBar:
    """The bar of one GPU from its atoms (present ones) and who holds each now."""
    model = find_model(gpu.model) if gpu.model else None
    present = [a for a in atoms if a.present and a.gpu_id == gpu.id]
    mig = {str(a.attributes.get("migUuid")): a for a in present if a.cls == "gpu.mig"}
    slots = sorted((a for a in present if a.cls == "gpu.slot"), key=lambda a: a.key)

    def state(atom: Atom) -> str:
        if not gpu.healthy:
            return "unhealthy"
        if changing or atom.partition_pending or gpu.mig_mode_current != gpu.mig_mode_pending:
            return "changing"
        return "booked" if holders.get(atom.id) else "free"

    def cell(atom: Atom, label: str, start: int, size: int) -> Cell:
        return Cell(
            atom.id, label, start, size, state(atom), _holder(holders.get(atom.id, ()), viewer, is_admin)
        )

    if mig:
        units = model.placement_units if model is not None and model.placement_units else 0
        units = max([units, *(i.placement_start + i.placement_size for i in gpu.mig_instances)])
        cells = tuple(
            cell(mig[i.uuid], i.profile, i.placement_start, i.placement_size)
            for i in sorted(gpu.mig_instances, key=lambda i: i.placement_start)
            if i.uuid in mig
        )
        return GpuBar(gpu.id, gpu.index, gpu.model or gpu.product, units, "mig", cells)
    if slots:
        cells = tuple(cell(a, f"slot {k}", k, 1) for k, a in enumerate(slots))
        return GpuBar(gpu.id, gpu.index, gpu.model or gpu.product, len(slots), "slots", cells)
    whole = [a for a in present if a.cls == "gpu"]
    cells = tuple(cell(a, "whole GPU", 0, 1) for a in whole[:1])
    return GpuBar(gpu.id, gpu.index, gpu.model or gpu.product, 1, "whole", cells)
