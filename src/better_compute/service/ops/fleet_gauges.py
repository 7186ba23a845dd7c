"""What /metrics' operational gauges read at scrape time: nodes by state and how long since each was
heard from, replicas no cluster took, what each tenant holds against its quota, and (opt in) which
GPU each allocation holds, named by DCGM's labels.

All of it is read from the store and the booking index in one read transaction when Prometheus
scrapes, so every server process answers the same numbers (docs/metrics.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ops.fleet_gauges import (
    NODE_STATES,
    HeldDevice,
    NodeState,
    contact_age_seconds,
    held_devices,
    node_state,
)
from better_compute.domain.placement.pool_fragmentation import (
    PoolShape,
    held_demand,
    pool_fragmentation,
    pool_shape,
)
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BookingIndex, PoolAtoms
from better_compute.service.ops.ports import OpsTx
from better_compute.service.placement.recorded_demand import DEMAND_WINDOW

MAX_UNPLACED_WORKLOADS = 10_000
"""Workloads with unplaced replicas read per scrape (oldest first): past it the gauge undercounts,
which a fleet that far behind notices otherwise."""

_INSTANT = timedelta(microseconds=1)


QuotaKey = tuple[str, str, str]
"""(tenant id, pool id, atom class)."""


@dataclass(frozen=True)
class FleetGauges:
    """What one scrape read of the fleet's operational state."""

    nodes: Mapping[tuple[str, NodeState, bool], int]
    """Nodes by (cluster, state, cordoned); every state of every cluster with nodes, zero included."""
    contact_age: Mapping[str, float]
    """Seconds since each node's `bcd` last reached the server, by node id (never-heard nodes absent)."""
    unplaced: Mapping[str, int]
    """Replicas no cluster took, by tenant."""
    quota_used: Mapping[QuotaKey, int]
    """Atoms each tenant's bookings hold now, by (tenant, pool, class); each quota row's key included."""
    quota_limit: Mapping[QuotaKey, int]
    """Each quota row's limit, by (tenant, pool, class)."""
    devices: list[HeldDevice]
    """The devices allocations hold now (empty unless asked for)."""
    fragmentation: Mapping[str, float] = field(default_factory=dict)
    """Each pool's share (0..1) of free GPU capacity its recorded request sizes cannot use, by pool id
    (`domain.placement.pool_fragmentation`)."""


def take(store: StorePort[OpsTx], index: BookingIndex, now: datetime, *, devices: bool) -> FleetGauges:
    """One read of the operational figures at `now`; `devices`: also which GPU each allocation holds."""
    with store.read() as tx:
        nodes = tx.nodes.page(None, None, None)
        states: Counter[tuple[str, NodeState, bool]] = Counter()
        for cluster in {n.cluster_id for n in nodes}:
            for state in NODE_STATES:
                states[(cluster, state, False)] += 0
                states[(cluster, state, True)] += 0
        ages: dict[str, float] = {}
        for n in nodes:
            states[(n.cluster_id, node_state(n, now), n.cordoned)] += 1
            age = contact_age_seconds(n, now)
            if age is not None:
                ages[n.id] = age
        unplaced: Counter[str] = Counter()
        for w in tx.workloads.unplaced(MAX_UNPLACED_WORKLOADS):
            unplaced[w.tenant_id] += w.unplaced
        limits = {(q.tenant_id, q.pool_id, q.cls): q.limit for q in tx.quotas.find(None, None)}
        used: Counter[QuotaKey] = Counter(dict.fromkeys(limits, 0))
        index.sync(tx)
        held: list[tuple[str, str, str, str]] = []
        for i in index.busy(Window(now, now + _INSTANT)):
            tenant, pool, cls = i.owner
            if tenant is not None and pool is not None and cls is not None:
                used[(tenant, pool, cls)] += 1
                held.append((tenant, i.allocation_id, pool, i.atom_id))
        return FleetGauges(
            nodes=states,
            contact_age=ages,
            unplaced=unplaced,
            quota_used=used,
            quota_limit=limits,
            devices=_devices(tx, index, held) if devices else [],
            fragmentation=fragmentation(tx, index, now),
        )


def fragmentation(
    tx: OpsTx, index: BookingIndex, now: datetime, pool_ids: Collection[str] | None = None
) -> dict[str, float]:
    """Each pool's fragmentation now (`pool_fragmentation`; only `pool_ids`' when given), against the
    sizes its reservations and replicas held in the last `DEMAND_WINDOW` (the sizes its atoms offer,
    for a pool with none). The index must have caught up with `tx` (`BookingIndex.sync`)."""
    busy = index.busy(Window(now, now + _INSTANT))
    # up to and with now: a booking that starts this instant is part of the record
    demand = held_demand(tx.usage.held_shapes(Window(now - DEMAND_WINDOW, now + _INSTANT), now))
    out: dict[str, float] = {}
    pools = tx.pools.all()
    for gone in set(_SHAPES) - {p.id for p in pools}:
        _SHAPES.pop(gone, None)  # a deleted pool's atoms are not kept for it
    for pool in pools:
        if pool_ids is not None and pool.id not in pool_ids:
            continue
        pool_atoms = index.pool_atoms(tx, pool.id)
        taken = index.taken(busy, pool_atoms)
        out[pool.id] = pool_fragmentation(_shape_of(pool.id, pool_atoms), taken, demand.get(pool.id))
    return out


_SHAPES: dict[str, tuple[PoolAtoms, PoolShape]] = {}
"""Each pool's `PoolShape`, with the snapshot of its atoms it was derived from: the booking index
replaces a pool's snapshot when its atoms change, so a scrape derives a pool's shape again only then
(reading every atom's share is most of the measure's cost on a large pool; which of them are held
is read on every scrape). A dict's get and set are atomic, so scrapes in several threads at worst
derive one twice."""


def _shape_of(pool_id: str, pool_atoms: PoolAtoms) -> PoolShape:
    cached = _SHAPES.get(pool_id)
    if cached is not None and cached[0] is pool_atoms:
        return cached[1]
    shape = pool_shape(pool_atoms.atoms.values())
    _SHAPES[pool_id] = (pool_atoms, shape)
    return shape


def _devices(tx: OpsTx, index: BookingIndex, held: list[tuple[str, str, str, str]]) -> list[HeldDevice]:
    """The devices of (tenant, allocation, pool, atom id) holdings, by DCGM's labels."""
    holders: list[tuple[str, str, Atom]] = []
    atoms_of: dict[str, Mapping[str, Atom]] = {}
    for tenant, allocation, pool, atom_id in held:
        if pool not in atoms_of:
            atoms_of[pool] = index.pool_atoms(tx, pool).atoms
        atom = atoms_of[pool].get(atom_id)
        if atom is not None:
            holders.append((tenant, allocation, atom))
    gpus = tx.gpus.by_ids(sorted({a.gpu_id for _, _, a in holders}))
    return held_devices(holders, gpus)


__all__ = ["DEMAND_WINDOW", "MAX_UNPLACED_WORKLOADS", "FleetGauges", "fragmentation", "take"]
