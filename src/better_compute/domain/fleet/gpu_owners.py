"""A GPU belongs to one node: the rule every inventory is checked by before any of it is taken.

A GPU's uuid, and the `MIG-…` uuid of each of its MIG instances, are *held* by a node while the GPU
is present on it (the node reported it and has not reported it gone). After that the node still
holds the GPU's uuid while a tenant's live booking of one of its atoms has not ended: the booking
was made in that node's pool, and moving the GPU would hand the tenant's device to another node and
pool. A report from any other node that names a held uuid is refused whole (`GpuOwnedElsewhere`):
nothing of it is taken, so a node that lies about its hardware can neither take a GPU nor, by
reporting again without it, take it from its node.

A GPU moves to another node once no node holds it: its node reported it gone and no tenant's booking
is left on it, or an admin released it (`nodes.releaseGpu`, `check_releasable`). Nodes are never
deleted, so "its node was removed" is a release too.

Among the reports of one batch the first that names a uuid nobody holds takes it, as the first of
two racing transactions would; between transactions the database decides (storage.fleet.gpus writes a
node's claim only where no other node's is, and refuses the write otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.kernel.errors import GpuOwnedElsewhere, InvalidState, listed


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """A uuid a node holds: which GPU it is (or is an instance of) and which node has it. `booked`:
    the node reported the GPU gone, and a tenant's live booking of it has not ended."""

    uuid: str
    gpu: str
    node: str
    booked: bool = False


def device_uuids(uuid: str, instances: Iterable[MigInstance]) -> tuple[str, ...]:
    """The uuids a GPU is known by: its own, then its MIG instances' (all held with it)."""
    return (uuid, *(i.uuid for i in instances))


def reported_uuids(gpus: Iterable[GpuReport]) -> list[str]:
    """Every uuid an inventory names, its GPUs' and their MIG instances'."""
    return [u for g in gpus for u in device_uuids(g.uuid, g.mig_instances)]


def refused_claims(
    reports: Sequence[tuple[str, Sequence[GpuReport]]], held: Mapping[str, Holder]
) -> dict[str, tuple[Holder, ...]]:
    """The uuids each report names that another node holds (`held`: the holders of the uuids the
    reports name), by the node that reported them; only reports with some are listed. The reports
    are taken in order, one node each: a uuid nobody holds is taken by the first report naming it,
    and a later report of another node naming it conflicts with that one. A refused report takes
    nothing."""
    taken: dict[str, tuple[str, str]] = {}  # by the reports before: uuid -> (GPU, node)
    refused: dict[str, tuple[Holder, ...]] = {}
    for node, gpus in reports:
        named = [(u, g.uuid) for g in gpus for u in device_uuids(g.uuid, g.mig_instances)]
        others = {held[u] for u, _ in named if u in held and held[u].node != node}
        others.update(Holder(u, *taken[u]) for u, _ in named if u in taken and taken[u][1] != node)
        if others:
            refused[node] = tuple(sorted(others))
            continue
        for uuid, gpu in named:
            if uuid not in held:
                taken.setdefault(uuid, (gpu, node))
    return refused


def owned_elsewhere(node: str, holders: Sequence[Holder], *, name_holders: bool = False) -> GpuOwnedElsewhere:
    """The refusal of `node`'s inventory, which names the uuids of `holders` (a GPU's, not each of its
    MIG instances' beside it). A node is told the
    uuids only (it learns nothing of other nodes, as with an allocation it does not hold); the
    holding nodes are named for an admin (`name_holders`: a fleet file's load; the refusal's event
    and `doctor` name them too)."""
    whole = {h.gpu for h in holders if h.uuid == h.gpu}
    named = sorted(
        {h for h in holders if h.uuid == h.gpu or h.gpu not in whole}
    )  # a GPU's MIG uuids go with it
    uuids = sorted({h.uuid for h in named})
    where = ""
    if name_holders:
        where = " (" + ", ".join(f"{h.uuid} on node {h.node}" for h in named) + ")"
    return GpuOwnedElsewhere(
        f"node {node} reports {listed(uuids)}, which another node holds{where}: a GPU belongs to one"
        " node until that node reports it gone or an admin releases it (nodes.releaseGpu); nothing"
        " of this report was taken",
        {"node": node, "uuids": uuids},
        {h.uuid: h.node for h in named},
    )


def check_releasable(gpu: str, node: str, held_until: Mapping[str, datetime | None]) -> None:
    """An admin releases a GPU from its node only while no tenant's live booking holds it
    (`held_until`: each allocation with a live booking of one of its atoms, and when the last of
    them ends; None: never). A booking made in the node's pool stays on the node's atom; releasing
    the GPU under it would strand the tenant, or hand its device to whichever node reports the GPU
    next. INVALID_STATE names the allocations and when they end: cancel or release them first, or
    wait."""
    if not held_until:
        return
    ends = list(held_until.values())
    free = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    allocations = sorted(held_until)
    until = f"until {_when(free)}" if free is not None else "with no end"
    raise InvalidState(
        f"GPU {gpu} of node {node} is booked by {listed(allocations)} {until}: a GPU is released"
        " only free of tenants' bookings; cancel or release them first (reservations cancel or"
        " release, workloads scale), or wait",
        {
            "gpuId": gpu,
            "node": node,
            "allocationIds": allocations,
            "freeFrom": None if free is None else _when(free),
        },
    )


def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


__all__ = [
    "Holder",
    "check_releasable",
    "device_uuids",
    "owned_elsewhere",
    "refused_claims",
    "reported_uuids",
]
