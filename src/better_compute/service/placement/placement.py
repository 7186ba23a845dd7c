"""Placement across clusters: the snapshot it decides on, the figures per cluster, and the preview
(docs/placement.md; the rules are `domain.placement`).

One read brings what placement needs for a tenant and a device class: the clusters, the pools the
tenant may use in each (its own, and those whose owner offered it quota rows), the tenant's quota
rows for the class and what it holds of it now, the placement policies that apply, and the nodes
that are cordoned. The free devices per pool come from the process's `Stock` (a cache over the
booking index). `domain.placement.verdicts.plan_placement` then decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from functools import cache

from better_compute.domain.fleet.clusters import accepts_placements
from better_compute.domain.fleet.records import Cluster
from better_compute.domain.metering.billing import Price
from better_compute.domain.placement.capability import Offer, Resolution, is_implicit, resolve
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.constraints import applicable, ceiling, deny
from better_compute.domain.placement.costs import Cost, replica_cost
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.priority_classes import priority_class_not_found
from better_compute.domain.placement.topology import FreeDevice, Room
from better_compute.domain.placement.verdicts import (
    REASONS,
    Ask,
    ClusterFigures,
    Placement,
    Reason,
    plan_placement,
)
from better_compute.domain.placement.workloads import WorkloadSpec
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.quota import effective_limit
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import preemption
from better_compute.service.placement.capabilities import floor_denials, offers_in, refusal
from better_compute.service.placement.class_quotas import ClassQuotaFigures
from better_compute.service.placement.placement_stock import PoolSeat, Stock
from better_compute.service.placement.ports import PlacementTx

INACTIVE = "cluster {cluster} is {phase}; only active clusters take new placements"


@dataclass
class Snapshot:
    """What placement decides on for one tenant and device class (read in one transaction)."""

    tenant_id: str
    device_class: DeviceClass
    clusters: Mapping[str, Cluster]
    pools: dict[str, list[PoolSeat]]
    """The pools the tenant may use, by cluster."""
    pool_left: dict[str, int | None]
    """Devices of the class the tenant may still take per pool (None: its own pool, not limited)."""
    pools_left: dict[str, tuple[tuple[str, int | None], ...]]
    """By cluster, its pools the tenant may use with what it may take of each (`pool_left`)."""
    quota: ClassQuotaFigures
    cordoned: frozenset[str]
    denials: dict[str, str] = field(default_factory=dict)
    """Why a cluster is refused by a policy or its phase, by cluster."""
    ceilings: dict[str, Decimal] = field(default_factory=dict)
    """The cost ceiling per hour the policies set, by cluster (none: no ceiling there)."""
    prices: Mapping[str, Price] = field(default_factory=dict)
    """Every meter's price (`Catalog.prices`)."""


def _policy_denials(
    found: Sequence[Policy],
    tenant_id: str,
    workload_id: str | None,
    device_class: str,
    clusters: Mapping[str, Cluster],
) -> tuple[dict[str, str], dict[str, Decimal]]:
    """Why the placement policies that apply (`found`) refuse each cluster (none refused: empty),
    and the cost ceiling they set in each (none set: empty)."""
    if not found:
        return {}, {}
    out: dict[str, str] = {}
    ceilings: dict[str, Decimal] = {}
    priced = any(p.constraints.cost_ceiling is not None for p in found)
    for cluster in clusters.values():
        mine = applicable(found, tenant_id=tenant_id, workload_id=workload_id, cluster_id=cluster.id)
        denial = deny(mine, cluster, device_class) if mine else None
        if denial is not None:
            out[cluster.id] = denial.message
        most = ceiling(mine) if priced and mine else None
        if most is not None:
            ceilings[cluster.id] = most
    return out, ceilings


def snapshot_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    tenant_id: str,
    device_class_name: str,
    workload_id: str | None,
    now: datetime,
    workload_policies: Sequence[Policy] | None = None,
) -> Snapshot:
    """Read everything placement needs for the tenant and class (NOT_FOUND for an unknown class).
    The workload's own policies are read unless given (`workload_policies`: a workload created in
    this transaction has only the one it made, if any).

    What the tenant holds comes from the booking index (caught up by the caller, under the tenant's
    lock when it writes), and which of those atoms are of the class from the stock's pool members:
    no read of the tenant's atoms, which would grow with everything it runs."""
    found = stock.device_class(tx, device_class_name)
    catalog = stock.catalog(tx, index)
    rules = stock.rules(tx, index, tenant_id, found.name)
    if workload_policies is None:
        workload_policies = (
            tx.policies.find(None, None, subject_type="workload", subject_id=workload_id)
            if workload_id is not None
            else ()
        )
    clusters = catalog.clusters
    offered: dict[str, dict[str, int]] = {}
    for q in rules.quotas:
        offered.setdefault(q.pool_id, {})[str(q.cls)] = q.limit
    # What the tenant holds is read only where it is needed (a limited pool, a class quota row): it
    # grows with everything the tenant runs, and an owner's own pools under no row need none of it.

    @cache
    def holding() -> list[tuple[str, str | None, str | None]]:
        # Every booking not ended by `now`, started or not: the replicas placed here are open-ended,
        # so a booking of the tenant's from a later instant (a write its lock queued this one behind)
        # is held beside them all the same.
        return index.holding_from(tenant_id, now)

    @cache
    def held_by_pool() -> Counter[str | None]:
        return Counter(pool for _, pool, cls in holding() if cls == found.cls)

    every_pool = catalog.seats
    pools: dict[str, list[PoolSeat]] = {}
    pool_left: dict[str, int | None] = {}
    for pool in every_pool.values():
        limits = offered.get(pool.id, {})
        if pool.owner_tenant_id != tenant_id and not limits:
            continue  # neither the tenant's pool nor offered to it
        limit = effective_limit(found.cls, tenant_id, pool.owner_tenant_id, limits)
        left = None if limit is None else max(0, limit - held_by_pool()[pool.id])
        if left == 0:
            continue
        pools.setdefault(pool.cluster_id, []).append(pool)
        pool_left[pool.id] = left
    class_rows: tuple[ClassQuota, ...] = rules.class_rows
    held: Counter[str] = Counter()
    members: dict[str, frozenset[str]] = {}
    for atom_id, pool_id, cls in holding() if class_rows else ():
        if cls != found.cls or pool_id is None or pool_id not in every_pool:
            continue
        if pool_id not in members:
            members[pool_id] = stock.members(tx, index, pool_id, found, now)
        if atom_id in members[pool_id]:
            held[every_pool[pool_id].cluster_id] += 1
    quota = ClassQuotaFigures(tenant_id, found.name, class_rows, dict(held))
    pools_left = {c: tuple((p.id, pool_left[p.id]) for p in seats) for c, seats in pools.items()}
    denials = {
        c.id: INACTIVE.format(cluster=c.id, phase=c.phase)
        for c in clusters.values()
        if not accepts_placements(c.phase)
    }
    policies = [*rules.policies, *workload_policies]
    refused, ceilings = _policy_denials(policies, tenant_id, workload_id, found.name, clusters)
    for cluster_id, why in refused.items():
        denials.setdefault(cluster_id, why)
    if is_implicit(found.name):
        usable = [p.id for seats in pools.values() for p in seats]
        floored = floor_denials(tx, index, stock, tenant_id, found.name, usable, list(clusters))
        for cluster_id, why in floored.items():
            denials.setdefault(cluster_id, why)
    return Snapshot(
        tenant_id,
        found,
        clusters,
        pools,
        pool_left,
        pools_left,
        quota,
        catalog.cordoned,
        denials,
        ceilings,
        catalog.prices,
    )


def quota_left(snap: Snapshot, cluster_id: str) -> tuple[int | None, bool]:
    """Devices of the class the quota rows leave the tenant in the cluster, and whether the fleet row
    decides there (None: no row limits it)."""
    if not snap.quota.rows:
        return None, False  # the common case, asked once per cluster of the fleet
    verdict = snap.quota.admit(cluster_id, 0)
    if verdict.limit is None:
        return None, False
    return max(0, verdict.limit - verdict.held), verdict.scope == "fleet"


def fleet_left(snap: Snapshot) -> int | None:
    fleet = next((r for r in snap.quota.rows if r.scope == "fleet"), None)
    return None if fleet is None else max(0, fleet.guaranteed_devices - sum(snap.quota.held.values()))


def rooms_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    snap: Snapshot,
    cluster_ids: Sequence[str],
    spec: WorkloadSpec,
    now: datetime,
) -> dict[str, Room]:
    """What the tenant's pools in each cluster hold of the workload's replicas now."""
    return stock.rooms_together(
        tx,
        index,
        {c: snap.pools_left.get(c, ()) for c in cluster_ids},
        snap.device_class,
        spec.device_count,
        spec.topology_kind,
        now,
        snap.cordoned,
    )


def free_devices_in(
    tx: PlacementTx, index: BookingIndex, stock: Stock, snap: Snapshot, cluster_id: str, now: datetime
) -> dict[str, tuple[tuple[FreeDevice, ...], int | None]]:
    """Per pool of the tenant's in the cluster, its free devices of the class (cordoned nodes left
    out) and how many of them the tenant may take (None: all)."""
    out: dict[str, tuple[tuple[FreeDevice, ...], int | None]] = {}
    for pool in snap.pools.get(cluster_id, ()):
        devices = stock.free(tx, index, pool.id, snap.device_class, now)
        if snap.cordoned:
            devices = tuple(d for d in devices if d.node not in snap.cordoned)
        out[pool.id] = (devices, snap.pool_left[pool.id])
    return out


def ask_of(spec: WorkloadSpec, replicas: int | None = None) -> Ask:
    return Ask(
        device_count=spec.device_count,
        replicas=spec.replicas if replicas is None else replicas,
        strategy=spec.strategy,
        floors=dict(spec.cluster_floors),
        max_clusters=spec.max_clusters,
        pinned=spec.pinned_cluster,
        single_domain=spec.single_domain,
    )


def plan_in(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    snap: Snapshot,
    spec: WorkloadSpec,
    current: Mapping[str, int],
    now: datetime,
    *,
    replicas: int | None = None,
    excluded: Mapping[str, str] | None = None,
    workload_id: str | None = None,
    skip_tenants: frozenset[str] = frozenset(),
    preempt: bool = True,
) -> tuple[Placement, list[preemption.Opened]]:
    """Placement of `spec` (or of `replicas` of it) over the snapshot's clusters, `current` being
    what the workload has booked per cluster; `excluded` clusters are refused with the message given
    (a drain's cluster). Replicas free devices cannot hold are placed by evicting others where the
    rules allow (`service.placement.preemption`; `skip_tenants`' replicas are left alone); the evictions
    come back beside the placement, which counts the replicas they make room for."""
    considered: Sequence[str] = (
        [spec.pinned_cluster] if spec.pinned_cluster is not None else sorted(snap.clusters)
    )
    rooms = rooms_in(tx, index, stock, snap, considered, spec, now)
    reserved: dict[str, int] = {}
    standing = stock.standing(tx, index, spec.device_class)
    if standing.floors and not preemption.preemptible(standing, spec):
        with_free = [c for c in considered if rooms[c].free_devices > 0]
        reserved = preemption.reserved_in(
            tx, index, stock, standing, spec.tenant_id, with_free, snap.device_class, now
        )
    figures = []
    for cluster_id in considered:
        left, fleet = quota_left(snap, cluster_id)
        denial = (excluded or {}).get(cluster_id) or snap.denials.get(cluster_id)
        figures.append(
            ClusterFigures(
                cluster_id=cluster_id,
                room=rooms[cluster_id],
                quota_left=left,
                denial=denial,
                current=current.get(cluster_id, 0),
                fleet_scoped=fleet,
                cost=_cost_in(tx, index, stock, snap, cluster_id, spec.device_count),
                reserved=reserved.get(cluster_id, 0),
            )
        )
    left = fleet_left(snap)
    plan = plan_placement(ask_of(spec, replicas), figures, left, stock.salt)
    if not preempt or plan.unplaced <= 0:
        return plan, []
    bounds = preemption.Room(
        pools={c: [p.id for p in seats] for c, seats in snap.pools.items()},
        pool_left=snap.pool_left,
        fleet_left=None if left is None else left // spec.device_count,
        fleet_scoped={f.cluster_id for f in figures if f.fleet_scoped},
        device_class=snap.device_class,
        cordoned=snap.cordoned,
    )
    opened = preemption.plan_evictions(
        tx, index, stock, spec, workload_id, plan, current, bounds, now, skip_tenants=skip_tenants
    )
    return preemption.with_evictions(plan, opened, spec.pinned_cluster is not None), opened


def _cost_in(
    tx: PlacementTx, index: BookingIndex, stock: Stock, snap: Snapshot, cluster_id: str, device_count: int
) -> Cost | None:
    """What a replica costs per hour in the cluster against the ceiling there (None: no ceiling;
    the rule: `domain.placement.costs`)."""
    most = snap.ceilings.get(cluster_id)
    if most is None:
        return None
    offers = [
        (pool.meter, stock.share(tx, index, pool.id, snap.device_class), snap.prices.get(pool.meter))
        for pool in snap.pools.get(cluster_id, ())
    ]
    return replica_cost(most, device_count, offers)


def main_reason(placement: Placement) -> Reason | None:
    """The reason to show for replicas left unplaced: the commonest among the clusters' verdicts."""
    if placement.unplaced <= 0:
        return None
    counted = Counter(v.reason for v in placement.verdicts if v.reason is not None)
    if not counted:
        return "insufficient_capacity"
    return min(counted, key=lambda r: (-counted[r], REASONS.index(r)))


def resolved(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    spec: WorkloadSpec,
    now: datetime,
    *,
    workload_id: str | None = None,
    workload_policies: Sequence[Policy] | None = None,
) -> tuple[WorkloadSpec, Resolution | None]:
    """`spec` with its capability resolved to an implicit class, and the resolution (None for a
    spec that names its class; a resolution with nothing chosen leaves the spec as it is). Of the
    kinds that give what is asked, cheapest first, the first that a cluster would take a replica of
    now wins (a plan for each, writing nothing: policies, phases, quotas and capacity all count),
    else the cheapest (the workload waits for it); kinds a quota row, a floor or a policy names
    by class are refused (`capabilities.refusal`). The workload's own policies count: those given,
    else those stored on `workload_id`."""
    if spec.capability is None or spec.device_class:
        return spec, None

    def places(offer: Offer) -> str | None:
        trial = replace(spec, device_class=offer.kind.class_name)
        snap = snapshot_in(
            tx,
            index,
            stock,
            spec.tenant_id,
            trial.device_class,
            workload_id,
            now,
            workload_policies=workload_policies,
        )
        plan, _ = plan_in(tx, index, stock, snap, trial, {}, now, workload_id=workload_id)
        if trial.replicas == 0 or plan.unplaced < trial.replicas:
            return None
        why = ", ".join(f"{v.cluster_id}: {v.reason}" for v in plan.verdicts[:3] if v.reason is not None)
        more = ", ..." if len(plan.verdicts) > 3 else ""
        return f"no cluster would take a replica of it now ({why or 'insufficient_capacity'}{more})"

    found = resolve(
        spec.capability,
        offers_in(tx, index, stock, spec.tenant_id, now),
        spec.device_count,
        refuses=refusal(tx, index, stock, spec.tenant_id),
        places=places,
    )
    if found.chosen is None:
        return spec, found
    return replace(spec, device_class=found.chosen.kind.class_name), found


@dataclass(frozen=True)
class Preview:
    spec: WorkloadSpec
    placement: Placement
    resolution: Resolution | None = None
    """What a shape asked by capability resolved to."""


def preview(
    store: StorePort[PlacementTx],
    index: BookingIndex,
    stock: Stock,
    principal: Principal,
    spec: WorkloadSpec,
    now: datetime,
    *,
    workload_id: str | None = None,
    current: Mapping[str, int] | None = None,
    workload_policies: Sequence[Policy] | None = None,
) -> Preview:
    """`placement.preview`: what placing `spec` would choose now. It writes nothing. The workload's
    own policies are read unless given (a shape not created yet: those it would make)."""
    with store.read() as tx:
        index.sync(tx)
        spec, resolution = resolved(
            tx, index, stock, spec, now, workload_id=workload_id, workload_policies=workload_policies
        )
        if resolution is not None and resolution.chosen is None:
            return Preview(spec, Placement({}, (), spec.replicas), resolution)
        snap = snapshot_in(
            tx, index, stock, spec.tenant_id, spec.device_class, workload_id, now, workload_policies
        )
        if spec.priority_class not in stock.standing(tx, index, spec.device_class).priority_classes:
            raise priority_class_not_found(spec.priority_class)
        plan, _ = plan_in(tx, index, stock, snap, spec, current or {}, now, workload_id=workload_id)
        return Preview(spec, plan, resolution)


__all__ = [
    "Preview",
    "Snapshot",
    "ask_of",
    "free_devices_in",
    "main_reason",
    "plan_in",
    "preview",
    "rooms_in",
    "snapshot_in",
]
