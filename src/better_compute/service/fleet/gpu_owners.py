"""A GPU belongs to one node (domain.fleet.gpu_owners): checking an inventory before any of it is taken, and
an admin's release of a GPU from its node (`nodes.releaseGpu`).

Every path that takes a node's inventory checks it here first: a signed report (`node_reports`,
alone or in a batch) and a fleet file's simulated reports (`inventory.ingest`). What a check read
may be out of date by the time the inventory is written (another node's report of the same new GPU
commits meanwhile): storage.fleet.gpus writes a node's claim on a uuid only where no other node's is, so
the database decides between the two, and the loser's transaction is refused whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from better_compute.domain.fleet.events import GpuReleased, NodeInventoryChanged
from better_compute.domain.fleet.gpu_owners import (
    Holder,
    check_releasable,
    owned_elsewhere,
    refused_claims,
    reported_uuids,
)
from better_compute.domain.fleet.inventory import GpuReport, NodeReport
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.fleet.gpu_states import record_nodes
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort

Reported = tuple[str, Sequence[GpuReport]]
"""A node's inventory as the check reads it: the node, and the GPUs it reports."""


def refused_in(tx: FleetTx, reports: Sequence[Reported], now: datetime) -> dict[str, tuple[Holder, ...]]:
    """The uuids each inventory names that another node holds at `now`, by the node that reported
    them (domain.fleet.gpu_owners.refused_claims; the reports in order, one node each)."""
    held = tx.gpus.holders(sorted({u for _, gpus in reports for u in reported_uuids(gpus)}))
    reporter = {g.uuid: node for node, gpus in reports for g in gpus}
    unheld = [uuid for uuid in reporter if uuid not in held]
    if unheld:  # known GPUs no node has present: still held by their node while its tenants book them
        moving = {g.id: g for g in tx.gpus.by_ids(unheld).values() if g.node_id != reporter[g.id]}
        held.update(_still_booked(tx, moving, now))
    return refused_claims(reports, held)


def _still_booked(tx: FleetTx, gpus: Mapping[str, Gpu], now: datetime) -> dict[str, Holder]:
    """Of GPUs no node has present, those a tenant's live booking still holds at `now`, each held
    (`booked`) by the node it was booked on."""
    if not gpus:
        return {}
    by_gpu = tx.atoms.ids_by_gpu(sorted({g.node_id for g in gpus.values()}))
    gpu_of = {atom: gpu for gpu in gpus for atom in by_gpu.get(gpu, ())}
    booked = {gpu_of[b.atom_id] for b in tx.ledger.live_on(sorted(gpu_of), now) if b.tenant_id is not None}
    return {gpu: Holder(gpu, gpu, gpus[gpu].node_id, booked=True) for gpu in booked}


def check_in(tx: FleetTx, reports: Sequence[NodeReport], now: datetime) -> None:
    """Refuse (GpuOwnedElsewhere, naming the holding nodes: the caller is an admin's load) reports
    of which one names a uuid another node holds, or another of them names first."""
    refused = refused_in(tx, [(r.node, r.gpus) for r in reports], now)
    for report in reports:
        if report.node in refused:
            raise owned_elsewhere(report.node, refused[report.node], name_holders=True)


def release(store: StorePort[FleetTx], principal: Principal, gpu_id: object, now: datetime) -> Gpu:
    """Release a GPU from its node (admin only): it is not present there from now on, its atoms
    are neither present nor bookable, its uuids are held by no node, and the next node that reports
    it takes it. Refused (INVALID_STATE, domain.fleet.gpu_owners.check_releasable) while a tenant's live
    booking, now or later, holds one of its atoms. A GPU already not present is answered as it
    is, with nothing written. Answers the GPU as written; audited by `gpu.released`."""
    require_admin(principal, "nodes.releaseGpu")
    uuid = check_ref(gpu_id, "gpu")
    with store.begin() as tx:
        found = tx.gpus.get(uuid)
        if found is None:
            raise NotFound(f"no node has reported a GPU {uuid}", {"gpu": uuid})
        # Its node's writers (reports, pool changes) hold the node too: none writes it meanwhile.
        tx.nodes.lock([found.node_id])
        gpu = tx.gpus.get(uuid)
        assert gpu is not None  # (GPU rows are never deleted)
        if not gpu.present:
            return gpu
        atoms = [a for a in tx.atoms.of_nodes([gpu.node_id]) if a.gpu_id == gpu.id]
        gone = sorted(
            (replace(a, present=False, bookable=False) for a in atoms if a.present or a.bookable),
            key=lambda a: a.id,
        )
        written = replace(gpu, present=False, updated_at=now)
        tx.gpus.put([written])
        # The atoms' rows first, then the bookings: a booking that locked them first has committed
        # and is seen; one that comes after finds them unbookable (storage.ledger.ledger.LOCKED_ATOMS_PG).
        tx.atoms.put(gone)
        held: dict[str, datetime | None] = {}
        for booking in tx.ledger.live_on([a.id for a in atoms], now):
            if booking.tenant_id is None:
                continue  # a layout change's holds: the gate's own, released by it
            end = booking.ends_at
            seen = held.get(booking.allocation_id, end)
            held[booking.allocation_id] = None if seen is None or end is None else max(seen, end)
        check_releasable(gpu.id, gpu.node_id, held)
        if any(a.present for a in atoms):
            tx.hooks.atoms_lost([a for a in atoms if a.present], now)  # an endpoint's copies on them move
        record_nodes(tx, [gpu.node_id], now)
        tx.events.append_all(
            [
                NodeInventoryChanged(gpu.node_id, 1, len(gone)),
                GpuReleased(gpu.id, gpu.node_id, principal.credential_id),
            ],
            now,
        )
        return written


__all__ = ["Reported", "check_in", "refused_in", "release"]
