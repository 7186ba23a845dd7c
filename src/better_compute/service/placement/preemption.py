"""Preemption in placement: whom a workload short of replicas evicts, and where (docs/scheduling.md; the rules
are `domain.placement.preemption` and `domain.placement.fairness`).

After placement has divided what free devices hold, replicas no cluster took may still be placed by
evicting others. For each cluster whose verdict failed only for capacity or topology (never one a
policy, a cost ceiling or quota refuses), this reads who runs on the devices of the class in the
tenant's pools there (the booking index), which of those are replicas and of which priority class
(one read of the replicas table), what every project holds there and the class rows' floors and
weights, and asks the pure planner for the victims that open the holes. The cluster that opens the
most replicas for the least disturbance goes first.

A write (`service.placement.workloads.place_in`) then takes the victims' tenants' workload locks without
waiting (`try_lock`): a tenant whose lock another write holds is left out and the plan made again
without its replicas, so two tenants preempting each other at once never deadlock. A preview takes
no lock and writes nothing.

A workload that already waits for replicas it evicted in a cluster (they terminate on their node)
evicts no more there until they are released: the devices are on their way to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.fairness import (
    Entitlement,
    Rules,
    entitlements,
    reserved_for_others,
    unused_floor,
)
from better_compute.domain.placement.preemption import (
    Board,
    Candidate,
    Eviction,
    plan_on,
    running_board,
    with_free,
)
from better_compute.domain.placement.priority_classes import STANDARD
from better_compute.domain.placement.topology import DomainKind, FreeDevice
from better_compute.domain.placement.verdicts import Placement, Verdict
from better_compute.domain.placement.workloads import WorkloadSpec
from better_compute.service.ledger.booking_index import BookingIndex, FamilyMember
from better_compute.service.placement.placement_stock import Standing, Stock
from better_compute.service.placement.ports import PlacementTx

RESERVATION_PRIORITY = 0
"""What a preemptible reservation counts as against a workload: the `standard` class's priority."""

PREEMPTIBLE_REASONS = (None, "insufficient_capacity", "topology_constraint_not_met")
"""Verdicts a preemption may overturn: capacity is what evictions free; a policy, a cost ceiling
or quota stays a refusal whoever runs there."""


@dataclass(frozen=True)
class Census:
    """Who holds the devices of the class in one cluster, now: every pool of the cluster counts
    for what each project holds and for the capacity (shares and floors are the cluster's, the
    same for every project that asks), and the tenant's own usable pools for what it may take."""

    devices: Mapping[str, tuple[FreeDevice, str]]
    """The bookable devices of the class in the tenant's usable pools there (cordoned nodes left
    out), with their pool: what it may take, free or by evicting."""
    free: tuple[FreeDevice, ...]
    """Those no booking holds from now on (claims of this process's writes in flight are taken
    out where it is used: they change with no event)."""
    held: Mapping[str, int]
    """Devices of the class each tenant holds in the cluster."""
    capacity: int
    """Bookable devices of the class in the cluster, in every pool (cordoned nodes left out)."""
    allocations: Mapping[str, tuple[tuple[str, ...], str | None, datetime]]
    """Each allocation holding some of `devices`: those atoms, its tenant, its start."""


@dataclass(frozen=True)
class Stand:
    """A cluster's census and its preemptible replicas (every workload's), with their boards per
    topology kind: kept per process while the cluster's bookings and the priority classes stand
    (`Stock.kept`), so the decisions of a retry pass, or of writes in a row, read them once."""

    census: Census
    candidates: tuple[Candidate, ...]
    boards: dict[DomainKind | None, Board] = field(default_factory=dict)

    def board(self, kind: DomainKind | None) -> Board:
        found = self.boards.get(kind)
        if found is None:
            found = self.boards[kind] = running_board(self.candidates, kind)
        return found


def preemptible(standing: Standing, spec: WorkloadSpec) -> bool:
    """Whether the workload's own priority class is preemptible (it may then borrow floors)."""
    found = standing.priority_classes.get(spec.priority_class)
    return found is not None and found.preemptible


def stand_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    standing: Standing,
    cluster_id: str,
    usable: Collection[str],
    device_class: DeviceClass,
    now: datetime,
    cordoned: Collection[str] = frozenset(),
) -> Stand:
    """The cluster's `Stand` for the class and the tenant's usable pools there, from the process's
    cache when nothing it was read from has changed."""
    seats = stock.catalog(tx, index).seats
    pools = sorted(p for p, seat in seats.items() if seat.cluster_id == cluster_id)
    version = (*index.pools_versions([[(p, None) for p in pools]])[0], index.catalog_version())
    key = ("stand", cluster_id, device_class.name, frozenset(usable), frozenset(cordoned))

    def build() -> tuple[Stand, datetime | None]:
        census, until = census_in(tx, index, stock, pools, usable, device_class, now, cordoned)
        return Stand(census, tuple(candidates_in(tx, census, standing))), until

    return stock.kept(key, version, now, build)


def census_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    pools: Sequence[str],
    usable: Collection[str],
    device_class: DeviceClass,
    now: datetime,
    cordoned: Collection[str] = frozenset(),
) -> tuple[Census, datetime | None]:
    """Who holds what of the class in these pools (a cluster's) now, from the booking index
    (`Census`), and the instant it would change by time alone; `usable` are the tenant's pools."""
    everything: dict[str, tuple[FreeDevice, str]] = {}
    for pool_id in pools:
        for device in stock.devices(tx, index, pool_id, device_class):
            everything[device.atom_id] = (device, pool_id)
    # A device is taken by a booking of its GPU's family that excludes it too (the GPU booked
    # whole while this is a part of it), though only its own booking's holder runs on it.
    families = {a: FamilyMember(d.gpu_id, device_class.cls) for a, (d, _) in everything.items()}
    holders, busy, until = index.holders_at(everything, now, families)
    devices = {a: dp for a, dp in everything.items() if dp[1] in usable and dp[0].node not in cordoned}
    free = tuple(d for a, (d, _) in devices.items() if a not in busy)
    held: Counter[str] = Counter()
    atoms_of: dict[str, list[str]] = {}
    meta: dict[str, tuple[str | None, datetime]] = {}
    for atom_id, (allocation, tenant, start) in holders.items():
        if tenant is not None:
            held[tenant] += 1
        if atom_id in devices:
            atoms_of.setdefault(allocation, []).append(atom_id)
            meta[allocation] = (tenant, start)
    allocations = {a: (tuple(atoms), meta[a][0], meta[a][1]) for a, atoms in atoms_of.items()}
    capacity = sum(1 for device, _ in everything.values() if device.node not in cordoned)
    return Census(devices, free, dict(held), capacity, allocations), until


def entitlements_in(standing: Standing, cluster_id: str) -> dict[str, Entitlement]:
    """Each tenant's floor and weight in the cluster (`fairness.entitlements`)."""
    return entitlements(standing.class_rows, cluster_id)


def reserved_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    standing: Standing,
    tenant_id: str,
    clusters: Collection[str],
    device_class: DeviceClass,
    now: datetime,
) -> dict[str, int]:
    """By cluster (of `clusters`), free devices other projects' unused floors keep from the
    tenant's non-preemptible work (clusters where none is kept left out). What a floored project
    holds is read from its own bookings in the index, never by walking the cluster's atoms."""
    floors = {
        (r.tenant_id, r.cluster_id): r.floor_devices
        for r in standing.class_rows
        if r.scope == "cluster"
        and r.floor_devices > 0
        and r.tenant_id != tenant_id
        and r.cluster_id in clusters
    }
    if not floors:
        return {}
    seats = stock.catalog(tx, index).seats
    held: Counter[tuple[str, str | None]] = Counter()
    for owner in sorted({t for t, _ in floors}):
        for atom_id, pool_id, cls in index.holding_at(owner, now):
            seat = seats.get(pool_id) if pool_id is not None else None
            if seat is None or cls != device_class.cls or (owner, seat.cluster_id) not in floors:
                continue
            if atom_id in stock.members(tx, index, seat.id, device_class, now):
                held[(owner, seat.cluster_id)] += 1
    out: Counter[str] = Counter()
    for (owner, cluster_id), floor in floors.items():
        if cluster_id is not None:
            out[cluster_id] += unused_floor(Entitlement(floor), held[(owner, cluster_id)])
    return {c: n for c, n in out.items() if n > 0}


def candidates_in(tx: PlacementTx, census: Census, standing: Standing) -> list[Candidate]:
    """The preemptible replicas running on the class's devices there, and the reservations made
    with `preemptible: true` holding them now (any other reservation is never evicted; the rules
    leave out the workload's own replicas, `Rules.skips`)."""
    running = tx.workloads.running(list(census.allocations))
    classes = standing.priority_classes
    devices = census.devices
    out = []
    for r in running:
        found = classes.get(r.priority_class)
        if found is None or not found.preemptible:
            continue  # never a victim: not worth a candidate
        atoms, _, start = census.allocations[r.allocation_id]
        out.append(
            Candidate(
                r.allocation_id,
                r.workload_id,
                r.tenant_id,
                tuple([devices[a][0] for a in atoms]),
                found.priority,
                True,
                start,
                r.priority_class,
                r.deployment_id,
            )
        )
    replicas = {r.allocation_id for r in running}
    others = [a for a in census.allocations if a not in replicas]
    for reservation in tx.reservations.preemptible_among(others) if others else ():
        atoms, _, start = census.allocations[reservation.id]
        out.append(
            Candidate(
                reservation.id,
                reservation.id,
                reservation.tenant_id,
                tuple([devices[a][0] for a in atoms]),
                RESERVATION_PRIORITY,
                True,
                start,
                STANDARD,
                "",
                True,
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
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    spec: WorkloadSpec,
    workload_id: str | None,
    plan: Placement,
    current: Mapping[str, int],
    room: Room,
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
    fleet_budget = None
    if room.fleet_left is not None:
        new = sum(max(0, n - current.get(c, 0)) for c, n in plan.shares.items() if c in room.fleet_scoped)
        fleet_budget = max(0, room.fleet_left - new)
    waiting = tx.workloads.awaiting(workload_id) if workload_id is not None else set()
    used = set(plan.shares) | {c for c, n in current.items() if n > 0}
    open_to = [v for v in plan.verdicts if _may_evict_in(v, spec, used, v.cluster_id in waiting)]
    seen: dict[str, Stand] = {}
    claimed = index.claimed()

    def option(verdict: Verdict, wanted: int) -> Opened | None:
        cluster_id = verdict.cluster_id
        new_there = min(max(0, plan.shares.get(cluster_id, 0) - current.get(cluster_id, 0)), verdict.room)
        allowed = wanted
        if verdict.quota_left is not None:
            allowed = min(allowed, verdict.quota_left // spec.device_count - new_there)
        if fleet_budget is not None and cluster_id in room.fleet_scoped:
            allowed = min(allowed, fleet_budget)
        pools = room.pools.get(cluster_id, ())
        limits = [room.pool_left.get(p) for p in pools]
        if pools and all(left is not None for left in limits):
            # the pools' quota rows cap what the tenant may book there, evictions or not
            allowed = min(allowed, sum((left or 0) // spec.device_count for left in limits) - new_there)
        if allowed <= 0:
            return None
        if cluster_id not in seen:
            seen[cluster_id] = stand_in(
                tx, index, stock, standing, cluster_id, set(pools), room.device_class, now, room.cordoned
            )
        stand = seen[cluster_id]
        if not stand.candidates:
            return None
        census = stand.census
        rows = entitlements_in(standing, cluster_id)
        free = [d for d in census.free if d.atom_id not in claimed] if claimed else list(census.free)
        if not lends:
            # other projects' unused floors are not this workload's to fill
            free = free[reserved_for_others(spec.tenant_id, rows, census.held) :]
        rules = Rules(
            spec.tenant_id,
            priority,
            dict(census.held),
            rows,
            capacity=census.capacity,
            devices=spec.device_count,
            workload_id=workload_id,
            skip_tenants=skip_tenants,
        )
        prepared = with_free(stand.board(spec.topology_kind), free)
        eviction = plan_on(prepared, spec.device_count, new_there + allowed, rules)
        extra = eviction.replicas - new_there
        if extra <= 0 or not eviction.victims:
            return None
        where = {
            d.atom_id: census.devices[d.atom_id][1] for v in eviction.victims for d in v.candidate.devices
        }
        return Opened(cluster_id, eviction, extra, where)

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
        if fleet_budget is not None and best.cluster_id in room.fleet_scoped:
            fleet_budget -= best.extra
        open_to = [v for v in open_to if v.cluster_id != best.cluster_id]
    return chosen


@dataclass(frozen=True)
class Room:
    """What bounds evictions besides the verdicts: the tenant's pools per cluster and what each
    lets it take, the fleet row's room (in replicas) and the clusters it decides in, the class,
    and the cordoned nodes."""

    pools: Mapping[str, Sequence[str]]
    pool_left: Mapping[str, int | None]
    fleet_left: int | None
    fleet_scoped: Collection[str]
    device_class: DeviceClass
    cordoned: Collection[str]


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
    extra = sum(o.extra for o in opened)
    # the replicas the evictions place are no longer short wherever they were counted short
    settled = extra
    verdicts = []
    for v in plan.verdicts:
        found = by_cluster.get(v.cluster_id)
        less = min(v.shortfall, settled)
        settled -= less
        if found is None:
            verdicts.append(replace(v, shortfall=v.shortfall - less) if less else v)
            continue
        n = len(found.eviction.victims)
        verdicts.append(
            replace(
                v,
                admitted=True,
                reason=None,
                room=v.room + found.extra,
                share=shares[v.cluster_id],
                shortfall=v.shortfall - less,
                message=f"cluster {v.cluster_id} can take {v.room + found.extra} more replica(s) by"
                f" preempting {n} replica(s) of other workloads",
            )
        )
    return Placement(
        shares,
        tuple(verdicts),
        max(0, plan.unplaced - extra),
        {o.cluster_id: o.eviction for o in opened},
    )


__all__ = [
    "Census",
    "Opened",
    "Room",
    "Stand",
    "census_in",
    "entitlements_in",
    "plan_evictions",
    "preemptible",
    "reserved_in",
    "stand_in",
    "with_evictions",
]
