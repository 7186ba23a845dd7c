"""Re-deriving atoms from stored inventory when a pool, not the node, changed.

Atoms normally follow node reports. When a pool's membership or `replicas` changes, the hardware did
not move, so the last stored report of each node (its GPU rows) is replayed through the same
ingestion as a live report. Atom ids are physical, so unchanged atoms keep their ids and bookings.

An atom that would vanish (a slot beyond the new replica count) or leave its pool (a node leaving)
while a live booking holds it is refused with INVALID_STATE: the booking's holder would otherwise lose
its device, or be billed to a pool it no longer runs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from better_compute.domain.errors import InvalidState
from better_compute.domain.inventory import GpuReport, MigInstance, NodeReport
from better_compute.service.inventory import IngestResult, ingest_in
from better_compute.service.ports import Row, Tx


def _gpu_report(row: Row) -> GpuReport:
    return GpuReport(
        uuid=row["id"],
        product=row["product"],
        memory_mib=row["memory_mib"],
        index=row["gpu_index"],
        numa_node=row["numa_node"],
        nvlink_peers=tuple(row["nvlink_peers"] or ()),
        healthy=row["healthy"],
        mig_mode_current=row["mig_mode_current"],
        mig_mode_pending=row["mig_mode_pending"],
        mig_instances=tuple(
            MigInstance(
                profile=i["profile"],
                gi_id=i["giId"],
                ci_id=i["ciId"],
                placement_start=i["placementStart"],
                placement_size=i["placementSize"],
                uuid=i["uuid"],
            )
            for i in row["mig_instances"] or ()
        ),
    )


def stored_reports(tx: Tx, node_ids: Sequence[str]) -> list[NodeReport]:
    """Each node's last report as stored: its present GPUs and the generation it last observed."""
    nodes = tx.inventory.nodes_by_id(node_ids)
    by_node: dict[str, list[GpuReport]] = {n: [] for n in node_ids}
    for row in sorted(tx.inventory.gpus_of_nodes(node_ids), key=lambda g: (g["node_id"], g["gpu_index"])):
        if row["present"]:
            by_node[row["node_id"]].append(_gpu_report(row))
    return [
        NodeReport(node=n, gpus=tuple(by_node[n]), observed_generation=nodes[n]["observed_generation"])
        for n in node_ids
        if n in nodes
    ]


def rederive_nodes(tx: Tx, node_ids: Sequence[str], now: datetime) -> IngestResult:
    """Re-derive the atoms of `node_ids` for their current pools, inside the caller's transaction."""
    if not node_ids:
        return IngestResult()
    before = {a["id"]: a for a in tx.inventory.atoms_of_nodes(node_ids) if a["present"]}
    result = ingest_in(tx, stored_reports(tx, node_ids), now)
    after = {a["id"]: a for a in tx.inventory.atoms_of_nodes(node_ids)}
    lost = sorted(
        atom_id
        for atom_id, old in before.items()
        if not after[atom_id]["present"] or after[atom_id]["pool_id"] != old["pool_id"]
    )
    if lost:
        held = tx.ledger.busy_spans(lost, now)
        if held:
            ends = [s.end for s in held]
            free = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
            raise InvalidState(
                f"{len(held)} live booking(s) hold atoms this change would remove from the pool"
                + (f"; they end by {free.isoformat()}" if free else "; some are open-ended"),
                {"atomIds": lost[:20], "freeFrom": free.isoformat() if free else None},
            )
    return result
