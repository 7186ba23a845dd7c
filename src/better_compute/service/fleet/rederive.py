"""Re-deriving atoms from stored inventory when a pool, not the node, changed.

Atoms normally follow node reports. When a pool's membership changes, or a node is told a new
layout or slot count (the layout gate's grant, an endpoint's cut), the hardware did not move, so
the last stored report of each node (its GPU rows) is replayed through the same ingestion as a live
report. Atom ids are physical, so unchanged atoms keep their ids and bookings.

An atom that would leave its pool (a node leaving) while a live booking holds it is refused with
INVALID_STATE: the booking's holder would otherwise lose its device, or be billed to a pool it no
longer runs in. (A slot count changes only under the gate's holds, so no tenant holds a slot then.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from better_compute.domain.fleet import pools
from better_compute.domain.fleet.inventory import GpuReport, NodeReport
from better_compute.service.fleet.inventory import IngestResult, ingest_in
from better_compute.service.fleet.ports import FleetTx


def stored_reports(tx: FleetTx, node_ids: Sequence[str]) -> list[NodeReport]:
    """Each node's last report as stored: its present GPUs and the generation it last observed."""
    nodes = tx.nodes.by_ids(node_ids)
    by_node: dict[str, list[GpuReport]] = {n: [] for n in node_ids}
    for gpu in sorted(tx.gpus.of_nodes(node_ids), key=lambda g: (g.node_id, g.index)):
        if gpu.present:
            by_node[gpu.node_id].append(gpu.report())
    return [
        NodeReport(node=n, gpus=tuple(by_node[n]), observed_generation=nodes[n].observed_generation)
        for n in node_ids
        if n in nodes
    ]


def rederive_nodes(tx: FleetTx, node_ids: Sequence[str], now: datetime) -> IngestResult:
    """Re-derive the atoms of `node_ids` for their current pools, inside the caller's transaction."""
    if not node_ids:
        return IngestResult()
    before = [a for a in tx.atoms.of_nodes(node_ids) if a.present]
    result = ingest_in(tx, stored_reports(tx, node_ids), now)
    lost = pools.atoms_leaving(before, {a.id: a for a in tx.atoms.of_nodes(node_ids)})
    if lost:
        pools.check_none_held(lost, tx.ledger.busy_spans(lost, now))
    return result


def rederive_told(tx: FleetTx, node_ids: Sequence[str], now: datetime) -> IngestResult:
    """Re-derive the atoms of nodes just told a new layout or slot count, inside the caller's
    transaction (which holds their locks): a new slot count's slots exist from now; a GPU not at its
    new layout is `partitionPending` until its node reports it there (`domain.fleet.atoms`)."""
    return ingest_in(tx, stored_reports(tx, node_ids), now)
