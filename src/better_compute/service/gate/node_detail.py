"""`nodes.get` (admin): one node, its GPUs, atoms, holders and layout gate, read in one transaction.

The layout each GPU is told comes from the same derivation the node's own spec read uses
(`node_spec.derive_in`), so what an operator sees pending is exactly what `bcd` is being told;
the holders are the ledger's live bookings on the node's atoms, so they agree with admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.endpoints.endpoints import ALLOCATION_PREFIX as ENDPOINT_PREFIX
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.records import Gpu, Node
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.ledger.ledger import is_partition_change
from better_compute.domain.ledger.records import LiveBooking
from better_compute.domain.placement.workloads import is_replica
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.gate.node_spec import derive_in
from better_compute.service.gate.ports import GateTx
from better_compute.service.kernel.ports import StorePort

METHOD = "nodes.get"


def holder_kind(allocation_id: str) -> str:
    """What holds an atom under this allocation: a `partition` booking (maintenance or a layout
    change), an `endpoint` instance, a workload `replica`, or else a `reservation`."""
    if is_partition_change(allocation_id):
        return "partition"
    if allocation_id.startswith(ENDPOINT_PREFIX):
        return "endpoint"
    if is_replica(allocation_id):
        return "replica"
    return "reservation"


@dataclass(frozen=True, slots=True)
class NodeDetail:
    """The node as read at `at`: `pool_id` its pool (None: in none), `told` the MIG layout each
    GPU's spec gives it by uuid, `holders` the live bookings on each atom by atom id."""

    at: datetime
    node: Node
    pool_id: str | None
    gpus: tuple[Gpu, ...]
    told: dict[str, str | None]
    atoms: tuple[Atom, ...]
    holders: dict[str, tuple[LiveBooking, ...]]
    gate: MigLayoutGate | None


def read(store: StorePort[GateTx], principal: Principal, node_id: str, now: datetime) -> NodeDetail:
    """The node's detail at `now`; an unknown node is NOT_FOUND, a tenant token FORBIDDEN (the
    answer names other tenants' allocations)."""
    require_admin(principal, METHOD)
    check_ref(node_id, "node")
    with store.read() as tx:
        node, gate, spec = derive_in(tx, node_id, now)
        pool = tx.pools.of_nodes([node_id]).get(node_id)
        gpus = sorted(tx.gpus.of_nodes([node_id]), key=lambda g: (g.index, g.id))
        atoms = tx.atoms.of_nodes([node_id])
        live = tx.ledger.live_on([a.id for a in atoms], now)
    by_atom: dict[str, list[LiveBooking]] = {}
    for b in sorted(live, key=lambda b: (b.starts_at, b.allocation_id)):
        by_atom.setdefault(b.atom_id, []).append(b)
    index = {g.id: (g.index, g.id) for g in gpus}
    ordered = sorted(
        atoms,
        key=lambda a: (index.get(a.gpu_id, (len(index), a.gpu_id)), a.cls != "gpu", a.id),
    )
    return NodeDetail(
        at=now,
        node=node,
        pool_id=pool.id if pool else None,
        gpus=tuple(gpus),
        told={g.uuid: g.mig_layout for g in spec.gpus},
        atoms=tuple(ordered),
        holders={k: tuple(v) for k, v in by_atom.items()},
        gate=gate,
    )
