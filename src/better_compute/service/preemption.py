"""Preemption in placement: whom a workload short of replicas evicts, and where (SPEC 10; the rules
are `domain.placement.preemption` and `domain.placement.fairness`).

After placement has divided what free devices hold, replicas no cluster took may still be placed by
evicting others. For each cluster whose verdict failed only for capacity or topology (never one a
policy, a cost ceiling or quota refuses), this reads who runs on the devices of the class in the
tenant's pools there (the booking index), which of those are replicas and of which priority class
(one read of the replicas table), what every project holds there and the class rows' floors and
weights, and asks the pure planner for the victims that open the holes. The cluster that opens the
most replicas for the least disturbance goes first.

A write (`service.workloads.place_in`) then takes the victims' tenants' workload locks without
waiting (`try_lock`): a tenant whose lock another write holds is left out and the plan made again
without its replicas, so two tenants preempting each other at once never deadlock. A preview takes
no lock and writes nothing.

A workload that already waits for replicas it evicted in a cluster (they terminate on their node)
evicts no more there until they are released: the devices are on their way to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.device_classes import DeviceClass
from better_compute.domain.placement.fairness import Entitlement, Rules, reserved_for_others
from better_compute.domain.placement.preemption import Candidate, Eviction, plan_preemption
from better_compute.domain.placement.topology import FreeDevice
from better_compute.domain.placement.verdicts import Placement, Verdict
from better_compute.domain.workloads import WorkloadSpec
from better_compute.service.booking_index import BookingIndex
from better_compute.service.placement_stock import Standing, Stock
from better_compute.service.ports import Tx

PREEMPTIBLE_REASONS = (None, "insufficient_capacity", "topology_constraint_not_met")
"""Verdicts a preemption may overturn: capacity is what evictions free; a policy, a cost ceiling
or quota stays a refusal whoever runs there."""


@dataclass(frozen=True)
class Census:
    """Who holds the devices of the class in the tenant's pools of one cluster, now."""

    devices: Mapping[str, tuple[FreeDevice, str]]
    """Every bookable device of the class there, with its pool."""
    free: tuple[FreeDevice, ...]
    """Those no booking holds and no write of this process has claimed."""
    held: Mapping[str, int]
    """Devices of the class each tenant holds there."""
    allocations: Mapping[str, tuple[tuple[str, ...], str | None, datetime]]
    """Each allocation holding some of them: its atoms there, its tenant, its start."""


def preemptible(standing: Standing, spec: WorkloadSpec) -> bool:
    """Whether the workload's own priority class is preemptible (it may then borrow floors)."""
    found = standing.priority_classes.get(spec.priority_class)
    return found is not None and found.preemptible


def census_in(
    tx: Tx,
    index: BookingIndex,
    stock: Stock,
    pool_ids: Sequence[str],
    device_class: DeviceClass,
    now: datetime,
) -> Census:
    """Who holds what of the class in these pools (of one cluster) now, from the booking index."""
    devices: dict[str, tuple[FreeDevice, str]] = {}
    for pool_id in pool_ids:
        for device in stock.devices(tx, index, pool_id, device_class):
            devices[device.atom_id] = (device, pool_id)
    holders = index.holders_at(devices, now)
    claimed = index.claimed()
    free = tuple(d for a, (d, _) in devices.items() if a not in holders and a not in claimed)
    held: Counter[str] = Counter()
    atoms_of: dict[str, list[str]] = {}
    meta: dict[str, tuple[str | None, datetime]] = {}
    for atom_id, (allocation, tenant, start) in holders.items():
        if tenant is not None:
            held[tenant] += 1
        atoms_of.setdefault(allocation, []).append(atom_id)
        meta[allocation] = (tenant, start)
    allocations = {a: (tuple(atoms), meta[a][0], meta[a][1]) for a, atoms in atoms_of.items()}
    return Census(devices, free, dict(held), allocations)


def entitlements_in(standing: Standing, cluster_id: str) -> dict[str, Entitlement]:
    """Each tenant's floor and weight in the cluster: its cluster row of the class, else its fleet
    row's weight (a floor is capacity in a cluster: a fleet row reserves none in any one)."""
    out: dict[str, Entitlement] = {}
    for row in standing.class_rows:
        if row.scope == "cluster" and row.cluster_id == cluster_id:
            out[row.tenant_id] = Entitlement(row.floor_devices, row.over_quota_weight)
        elif row.scope == "fleet" and row.tenant_id not in out:
            out[row.tenant_id] = Entitlement(0, row.over_quota_weight)
    return out


def reserved_in(
    tx: Tx,
    index: BookingIndex,
    stock: Stock,
    standing: Standing,
    tenant_id: str,
    pools_by_cluster: Mapping[str, Sequence[str]],
    device_class: DeviceClass,
    now: datetime,
) -> dict[str, int]:
    """By cluster, free devices other projects' unused floors keep from the tenant's
    non-preemptible work (clusters where none is kept left out)."""
    floored = {
        r.cluster_id
        for r in standing.class_rows
        if r.scope == "cluster" and r.floor_devices > 0 and r.tenant_id != tenant_id and r.cluster_id
    }
    out: dict[str, int] = {}
    for cluster_id in sorted(c for c in floored if c is not None):
        pools = pools_by_cluster.get(cluster_id, ())
        if not pools:
            continue
        census = census_in(tx, index, stock, pools, device_class, now)
        reserved = reserved_for_others(tenant_id, entitlements_in(standing, cluster_id), census.held)
        if reserved > 0:
            out[cluster_id] = reserved
    return out


def candidates_in(
    tx: Tx, census: Census, standing: Standing, workload_id: str | None, skip_tenants: frozenset[str]
) -> list[Candidate]:
    """The replicas running on the class's devices there (reservations are never evicted), the
    workload's own left out."""
    running = tx.workloads.running(list(census.allocations))
    out = []
    for r in running:
        if r.workload_id == workload_id or r.tenant_id in skip_tenants:
            continue
        atoms, _, start = census.allocations[r.allocation_id]
        found = standing.priority_classes.get(r.priority_class)
        out.append(
            Candidate(
                allocation_id=r.allocation_id,
                workload_id=r.workload_id,
                tenant_id=r.tenant_id,
                devices=tuple(census.devices[a][0] for a in atoms),
                priority=found.priority if found is not None else 0,
                preemptible=found.preemptible if found is not None else False,
                started=start,
                priority_class=r.priority_class,
                deployment_id=r.deployment_id,
            )
        )
    return out


@dataclass(frozen=True)
class Opened:
    """One cluster's eviction: the plan, how many replicas beyond the free devices' it places, and
    the pool of each device its victims hold."""

    cluster_id: str
    eviction: Eviction
    extra: int
    pools: Mapping[str, str]


def plan_evictions(
    tx: Tx,
    index: BookingIndex,
    stock: Stock,
    spec: WorkloadSpec,
    workload_id: str | None,
    plan: Placement,
    current: Mapping[str, int],
    pools_by_cluster: Mapping[str, Sequence[str]],
    device_class: DeviceClass,
    fleet_room: int | None,
    now: datetime,
    *,
    skip_tenants: frozenset[str] = frozenset(),
) -> list[Opened]:
    """Where evictions would place the replicas `plan` left unplaced (module docstring); empty
    when no priority class is preemptible, nothing is unplaced, or nobody may be evicted."""
    standing = stock.standing(tx, index, spec.device_class)
    if plan.unplaced <= 0 or not standing.preemptible:
        return []
    mine = standing.priority_classes.get(spec.priority_class)
    priority = mine.priority if mine is not None else 0
    lends = mine is not None and mine.preemptible
    needed = plan.unplaced
    if fleet_room is not None:
        new = sum(max(0, n - current.get(c, 0)) for c, n in plan.shares.items())
        needed = min(needed, max(0, fleet_room - new))
    waiting = tx.workloads.awaiting(workload_id) if workload_id is not None else set()
    used = set(plan.shares) | {c for c, n in current.items() if n > 0}
    open_to = [v for v in plan.verdicts if _may_evict_in(v, spec, used, v.cluster_id in waiting)]
    seen: dict[str, tuple[Census, list[Candidate]]] = {}

    def option(verdict: Verdict, wanted: int) -> Opened | None:
        cluster_id = verdict.cluster_id
        new_there = min(max(0, plan.shares.get(cluster_id, 0) - current.get(cluster_id, 0)), verdict.room)
        allowed = wanted
        if verdict.quota_left is not None:
            allowed = min(allowed, verdict.quota_left // spec.device_count - new_there)
        if allowed <= 0:
            return None
        if cluster_id not in seen:
            census = census_in(tx, index, stock, pools_by_cluster.get(cluster_id, ()), device_class, now)
            seen[cluster_id] = (census, candidates_in(tx, census, standing, workload_id, skip_tenants))
        census, candidates = seen[cluster_id]
        if not candidates:
            return None
        rows = entitlements_in(standing, cluster_id)
        free = census.free
        if not lends:
            # other projects' unused floors are not this workload's to fill
            free = free[reserved_for_others(spec.tenant_id, rows, census.held) :]
        rules = Rules(
            spec.tenant_id,
            priority,
            dict(census.held),
            rows,
            capacity=len(census.devices),
            devices=spec.device_count,
        )
        eviction = plan_preemption(
            free, candidates, spec.device_count, new_there + allowed, spec.topology_kind, rules
        )
        extra = eviction.replicas - new_there
        if extra <= 0 or not eviction.victims:
            return None
        pools = {
            d.atom_id: census.devices[d.atom_id][1] for v in eviction.victims for d in v.candidate.devices
        }
        return Opened(cluster_id, eviction, extra, pools)

    chosen: list[Opened] = []
    while needed > 0 and open_to:
        if spec.max_clusters is not None and len(used | {o.cluster_id for o in chosen}) >= spec.max_clusters:
            open_to = [v for v in open_to if v.cluster_id in used]
        options = [o for o in (option(v, needed) for v in open_to) if o is not None]
        if not options:
            break
        best = min(options, key=lambda o: (-o.extra, len(o.eviction.victims), o.cluster_id))
        chosen.append(best)
        needed -= best.extra
        open_to = [v for v in open_to if v.cluster_id != best.cluster_id]
    return chosen


def _may_evict_in(verdict: Verdict, spec: WorkloadSpec, used: set[str], awaiting: bool) -> bool:
    if verdict.reason not in PREEMPTIBLE_REASONS or awaiting:
        return False
    if spec.pinned_cluster is not None and verdict.cluster_id != spec.pinned_cluster:
        return False
    return spec.max_clusters is None or len(used) < spec.max_clusters or verdict.cluster_id in used


def with_evictions(plan: Placement, opened: Sequence[Opened], pinned: bool) -> Placement:
    """`plan` with each opened cluster's extra replicas in its share (a pinned workload's share is
    all its replicas already) and verdict, and its victims."""
    if not opened:
        return plan
    shares = dict(plan.shares)
    by_cluster = {o.cluster_id: o for o in opened}
    for o in opened:
        if not pinned:
            shares[o.cluster_id] = shares.get(o.cluster_id, 0) + o.extra
    verdicts = []
    for v in plan.verdicts:
        found = by_cluster.get(v.cluster_id)
        if found is None:
            verdicts.append(v)
            continue
        n = len(found.eviction.victims)
        verdicts.append(
            replace(
                v,
                admitted=True,
                reason=None,
                room=v.room + found.extra,
                share=shares[v.cluster_id],
                shortfall=max(0, v.shortfall - found.extra),
                message=f"cluster {v.cluster_id} can take {v.room + found.extra} more replica(s) by"
                f" preempting {n} replica(s) of other workloads",
            )
        )
    extra = sum(o.extra for o in opened)
    return Placement(
        shares,
        tuple(verdicts),
        max(0, plan.unplaced - extra),
        {o.cluster_id: o.eviction for o in opened},
    )


__all__ = [
    "Census",
    "Opened",
    "census_in",
    "entitlements_in",
    "plan_evictions",
    "preemptible",
    "reserved_in",
    "with_evictions",
]
