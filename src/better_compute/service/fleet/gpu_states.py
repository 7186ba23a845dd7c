"""Recording GPU state history: each writer of what decides a GPU's capacity records it here, in its
own transaction (docs/adr/0009-gpu-state-history.md).

Node reports and pool changes (membership, `replicas`) all reach the GPUs and atoms through
`service.fleet.inventory.ingest_in`, which calls `record_nodes` for the nodes it changed. A node's cordon
(`service.fleet.clusters.update_node`) calls it too, after its change, in the same transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.gpu_states import GpuState, plan_changes, state_of
from better_compute.domain.fleet.records import Gpu
from better_compute.service.fleet.ports import FleetTx


def record_nodes(
    tx: FleetTx,
    node_ids: Sequence[str],
    now: datetime,
    written: tuple[Iterable[Gpu], Iterable[Atom]] | None = None,
) -> int:
    """Bring the history of every GPU of these nodes up to what the transaction has written so far:
    a GPU whose state changed gets a new period from `now`, one gone has its period closed.
    Returns how many GPUs changed.

    `written`, when given, is every GPU and atom of these nodes as the transaction has written
    them (ingest has them in hand: reading back a fleet's worth of rows it has just written was a
    third of its time); otherwise they are read.

    The caller holds the nodes (`tx.nodes.lock`, or SQLite's one writer), so no other writer
    records them meanwhile, and one open period per GPU is also a unique index."""
    if not node_ids:
        return 0
    nodes = tx.nodes.by_ids(node_ids)
    pools = tx.pools.of_nodes(node_ids)
    gpus, node_atoms = (
        written if written is not None else (tx.gpus.of_nodes(node_ids), tx.atoms.of_nodes(node_ids))
    )
    atoms: dict[str, list[Atom]] = defaultdict(list)
    for atom in node_atoms:
        atoms[atom.gpu_id].append(atom)
    states: dict[str, GpuState | None] = {}
    for gpu in gpus:
        node, pool = nodes.get(gpu.node_id), pools.get(gpu.node_id)
        states[gpu.id] = (
            state_of(
                gpu.id,
                gpu.node_id,
                pool.id if pool else None,
                gpu.healthy,
                node.cordoned if node else False,
                atoms[gpu.id],
            )
            if gpu.present
            else None
        )
    changes = plan_changes(tx.gpu_states.open_of(list(states)), states, now)
    tx.gpu_states.write(changes)
    return len(changes)
