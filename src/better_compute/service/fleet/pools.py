"""Pools: creating them, changing their policy or nodes, and offering them to other tenants.

A pool's sharing mode decides what its GPUs become (docs/concepts.md#atoms), so it is fixed at
creation; its policy (`replicas`, `migLayout`) and its nodes may change. Every change bumps the
pool's `generation`, and a change that decided on a stale snapshot is caught by compare-and-swap:
retried when the race was the server's own, CONFLICT when the client named the generation it had read.

Visibility: the admin sees every pool; a tenant sees the pools it owns and those it has quota rows in.
Any other pool is NOT_FOUND to it, exactly like a pool that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from better_compute.domain.endpoints.records import EndpointInstance
from better_compute.domain.fleet.events import PoolCreated, PoolDeleted, PoolUpdated
from better_compute.domain.fleet.pools import (
    SLOT_MODES,
    PoolSettings,
    check_deletable,
    check_layout_fits,
    check_members,
    check_mode,
    check_mode_kept,
    check_settings,
)
from better_compute.domain.fleet.records import Pool
from better_compute.domain.gate.events import MigLayoutRequested
from better_compute.domain.gate.mig_gate import pool_shape
from better_compute.domain.kernel.errors import (
    AlreadyExists,
    ConcurrentChange,
    GenerationMismatch,
    InvalidInput,
    InvalidState,
    NotFound,
)
from better_compute.domain.ops.fleet import default_meter
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.events import PoolOffered
from better_compute.domain.tenancy.records import Quota
from better_compute.domain.tenancy.tenancy import (
    check_name,
    check_ref,
    check_slug,
    pool_not_found,
    sees_pool,
    tenant_not_found,
)
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.fleet.rederive import rederive_nodes
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tenancy import quotas

UPDATE_ATTEMPTS = 3
"""How often an update that lost a race the client did not ask about is retried on a fresh snapshot."""


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool with its nodes, as the pools methods answer."""

    pool: Pool
    nodes: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.pool.id


class Raced(Exception):
    """Another writer bumped the pool's generation between our read and our write."""


def _members(tx: FleetTx, pool_id: str) -> list[str]:
    return tx.pools.members([pool_id])[pool_id]


def _visible(tx: FleetTx, principal: Principal) -> list[Pool]:
    found = tx.pools.all()
    if not principal.is_admin:
        mine = quotas.quota_pool_ids(tx, principal.tenant_id)
        found = [p for p in found if sees_pool(principal, p.owner_tenant_id, mine, p.id)]
    return found


def seen_pool_ids(tx: FleetTx, principal: Principal) -> set[str]:
    """The ids of the pools the caller may see, read in the caller's own transaction."""
    return {p.id for p in _visible(tx, principal)}


def visible_pool_ids(store: StorePort[FleetTx], principal: Principal) -> set[str] | None:
    """The ids of the pools the caller may see; None means every pool (the admin)."""
    if principal.is_admin:
        return None
    with store.read() as tx:
        return {p.id for p in _visible(tx, principal)}


def _get_visible(tx: FleetTx, principal: Principal, pool_id: str) -> PoolView:
    pool = tx.pools.get(pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    if not principal.is_admin and not sees_pool(
        principal, pool.owner_tenant_id, quotas.quota_pool_ids(tx, principal.tenant_id), pool_id
    ):
        raise pool_not_found(pool_id)
    return PoolView(pool, tuple(_members(tx, pool_id)))


def get_pool(store: StorePort[FleetTx], principal: Principal, pool_id: str) -> PoolView:
    """One pool with its nodes, if the caller may see it."""
    with store.read() as tx:
        return _get_visible(tx, principal, pool_id)


def list_pools(
    store: StorePort[FleetTx],
    principal: Principal,
    *,
    cluster_id: str | None = None,
    owner_tenant_id: str | None = None,
    mode: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing[PoolView]:
    """The pools the caller may see, filtered, each with its nodes."""
    with store.read() as tx:
        found = [
            p
            for p in _visible(tx, principal)
            if (cluster_id is None or p.cluster_id == cluster_id)
            and (owner_tenant_id is None or p.owner_tenant_id == owner_tenant_id)
            and (mode is None or p.mode == mode)
        ]
        members = tx.pools.members() if found else {}
    views = [PoolView(p, tuple(members.get(p.id, ()))) for p in found]
    return page(views, lambda v: v.id, limit, after)


def _check_nodes(tx: FleetTx, cluster_id: str, node_ids: Sequence[str], pool_id: str | None) -> None:
    for node in node_ids:
        check_ref(node, "nodes")
    pool_of_node = {n: p.id for n, p in tx.pools.of_nodes(node_ids).items()}
    check_members(node_ids, tx.nodes.by_ids(node_ids), cluster_id, pool_of_node, pool_id)


def _set_members(tx: FleetTx, pool_id: str, node_ids: Sequence[str]) -> None:
    if not tx.pools.set_members(pool_id, node_ids):
        raise ConcurrentChange(
            "another pool took one of these nodes meanwhile; read the pools again and retry"
        )


def _first_model(tx: FleetTx, node_ids: Sequence[str]) -> str | None:
    models = sorted(g.model for g in tx.gpus.of_nodes(node_ids) if g.model)
    return models[0] if models else None


def create(
    store: StorePort[FleetTx],
    principal: Principal,
    *,
    name: str,
    cluster_id: str,
    mode: str,
    owner_tenant_id: str,
    nodes: Sequence[str] = (),
    policy: Mapping[str, Any] | None = None,
    owner_quota: Mapping[str, int] | None = None,
    meter: str | None = None,
    now: datetime,
) -> PoolView:
    """Create a pool over nodes of one cluster (admin only); its id is its name.

    `ownerQuota` writes the owner's rows (without it the owner has whole GPUs only). The nodes' atoms
    are re-derived at once, so the pool is bookable as soon as this returns.
    """
    require_admin(principal, "pools.create")
    pool_id = check_slug(name, "name")
    sharing = check_mode(mode)
    settings = check_settings(sharing, policy or {}, "pools.create", without_nodes=not nodes)
    owner_limits = quotas.check_limits(owner_quota, "ownerQuota") if owner_quota is not None else {}
    check_ref(cluster_id, "clusterId")
    check_ref(owner_tenant_id, "ownerTenantId")
    with store.begin() as tx:
        return create_in(
            tx,
            pool_id=pool_id,
            cluster_id=cluster_id,
            mode=sharing,
            owner_tenant_id=owner_tenant_id,
            nodes=list(nodes),
            settings=settings,
            owner_limits=owner_limits,
            meter=None if meter is None else check_name(meter, "meter", 64),
            now=now,
        )


def create_in(
    tx: FleetTx,
    *,
    pool_id: str,
    cluster_id: str,
    mode: str,
    owner_tenant_id: str,
    nodes: Sequence[str],
    settings: PoolSettings,
    owner_limits: Mapping[str, int],
    meter: str | None,
    now: datetime,
) -> PoolView:
    """Create a pool inside the caller's transaction: the one path every new pool takes (the
    `pools.create` method and the fleet loader), with every check and event."""
    sharing = check_mode(mode)
    members = list(nodes)
    if tx.pools.get(pool_id) is not None:
        raise AlreadyExists(f"pool {pool_id} already exists", {"poolId": pool_id})
    if tx.tenants.hold(owner_tenant_id) is None:
        raise tenant_not_found(owner_tenant_id)
    if tx.clusters.get(cluster_id) is None:
        raise NotFound(f"cluster {cluster_id} not found", {"clusterId": cluster_id})
    _check_nodes(tx, cluster_id, members, None)
    if sharing == "mig":
        check_layout_fits(tx.gpus.of_nodes(members), settings.layout)
    pool = Pool(
        id=pool_id,
        name=pool_id,
        cluster_id=cluster_id,
        owner_tenant_id=owner_tenant_id,
        mode=sharing,
        settings=settings,
        meter=meter if meter is not None else default_meter(sharing, _first_model(tx, members)),
        generation=1,
        created_at=now,
    )
    if not tx.pools.add(pool):
        raise AlreadyExists(f"pool {pool_id} already exists", {"poolId": pool_id})
    _set_members(tx, pool_id, members)
    if owner_limits:
        quotas.write_rows(tx, owner_tenant_id, pool_id, owner_limits, now)
    tx.events.append(
        PoolCreated(pool_id, sharing, settings.as_mapping(), tuple(members), owner_tenant_id), now
    )
    rederive_nodes(tx, members, now)
    return PoolView(pool, tuple(sorted(members)))


def update(
    store: StorePort[FleetTx],
    principal: Principal,
    pool_id: str,
    *,
    policy: Mapping[str, Any] | None = None,
    nodes: Sequence[str] | None = None,
    generation: int | None = None,
    mode: str | None = None,
    now: datetime,
) -> PoolView:
    """Change a pool's policy and/or nodes (admin only); every update bumps `generation`.

    A `scrub` turned on counts every atom of the pool as clean now: it applies to atoms released
    from then on (domain.ledger.scrub). A new `migLayout` is validated on every node's GPU model and
    recorded, with the event `pool.mig_layout.requested`, and gates every node of the pool
    (`service.gate.mig_gate`): each keeps its layout until the gate grants it the new one, never
    repartitioned under a holder. A new `replicas` (timeslice and mps pools) goes through the same
    gate: each node keeps its slots, and its holders theirs, until it is granted the new count.
    """
    require_admin(principal, "pools.update")
    check_ref(pool_id, "id")
    for _ in range(UPDATE_ATTEMPTS):
        try:
            with store.begin() as tx:
                return update_in(tx, pool_id, policy, nodes, generation, mode, now)
        except Raced:
            if generation is not None:
                raise GenerationMismatch(
                    f"pool {pool_id} changed while this update was applied; read it again and retry",
                    {"poolId": pool_id, "expected": generation},
                ) from None
    raise ConcurrentChange(f"pool {pool_id} kept changing under this update; try again", {"poolId": pool_id})


@dataclass(frozen=True)
class NodeLayoutChange:
    """A node of a pool whose layout (or slot count) a pool update gates: from `frozen` to `pending`,
    re-cut once no tenant's booking holds it. `held_until`: the latest end of the tenants' bookings
    on it now (None: none, it is cut at the gate's next step); `open_ended`: one never ends, so the
    change waits until it is released; `tenants`: whose bookings they are."""

    node: str
    frozen: str | None
    pending: str
    held_until: datetime | None
    open_ended: bool
    tenants: tuple[str, ...]


@dataclass(frozen=True)
class PoolUpdatePlan:
    """What `pools.update` with `dryRun` answers: the pool as the update would leave it, and the
    layout changes it would put under way."""

    view: PoolView
    changes: tuple[NodeLayoutChange, ...]


class _Planned(Exception):
    """Raised inside a dry run's transaction so that everything it wrote is rolled back."""

    def __init__(self, plan: PoolUpdatePlan) -> None:
        super().__init__("dry run")
        self.plan = plan


def plan_update(
    store: StorePort[FleetTx],
    principal: Principal,
    pool_id: str,
    *,
    policy: Mapping[str, Any] | None = None,
    nodes: Sequence[str] | None = None,
    generation: int | None = None,
    now: datetime,
) -> PoolUpdatePlan:
    """`pools.update` with `dryRun`: the very same update (every check and refusal, the gate's
    requests) in a transaction that is rolled back, answering the pool as it would be and each node
    whose layout would change, with the tenants' bookings the gate would wait for. Nothing is
    written."""
    require_admin(principal, "pools.update")
    check_ref(pool_id, "id")
    try:
        with store.begin() as tx:
            view = update_in(tx, pool_id, policy, nodes, generation, None, now)
            raise _Planned(PoolUpdatePlan(view, _changes(tx, pool_id, view.nodes, now)))
    except Raced:  # another writer moved the pool meanwhile: the caller asks again
        if generation is not None:
            raise GenerationMismatch(
                f"pool {pool_id} changed while this update was planned; read it again and retry",
                {"poolId": pool_id, "expected": generation},
            ) from None
        raise ConcurrentChange(
            f"pool {pool_id} changed while this update was planned; try again", {"poolId": pool_id}
        ) from None
    except _Planned as planned:
        return planned.plan


def _changes(
    tx: FleetTx, pool_id: str, node_ids: Sequence[str], now: datetime
) -> tuple[NodeLayoutChange, ...]:
    """The pool's nodes with a layout change under way (as the update left them), each with the
    tenants' bookings it waits for."""
    gates = {n: g for n, g in tx.mig_layouts.of_nodes(node_ids).items() if g.pool_id == pool_id}
    atoms = tx.atoms.ids_by_gpu(sorted(gates))
    gpu_node = {gpu.id: gpu.node_id for gpu in tx.gpus.of_nodes(sorted(gates))}
    held: dict[str, list[tuple[datetime | None, str]]] = {n: [] for n in gates}
    ids = [a for gpu_atoms in atoms.values() for a in gpu_atoms]
    node_of_atom = {a: gpu_node.get(gpu) for gpu, gpu_atoms in atoms.items() for a in gpu_atoms}
    for booking in tx.ledger.live_on(ids, now):
        node = node_of_atom.get(booking.atom_id)
        if booking.tenant_id is not None and node in held:
            held[node].append((booking.ends_at, booking.tenant_id))
    changes = []
    for node, gate in sorted(gates.items()):
        ends = held[node]
        open_ended = any(end is None for end, _ in ends)
        latest = max((end for end, _ in ends if end is not None), default=None)
        tenants = tuple(sorted({t for _, t in ends}))
        changes.append(
            NodeLayoutChange(node, gate.frozen_layout, gate.pending_layout, latest, open_ended, tenants)
        )
    return tuple(changes)


def check_not_serving(pool_id: str, leaving: Sequence[str], serving: Mapping[str, EndpointInstance]) -> None:
    """A node serving an endpoint stays in its pool until the endpoint is deleted."""
    held = [n for n in leaving if n in serving]
    if held:
        raise InvalidState(
            f"node {held[0]} serves endpoint {serving[held[0]].endpoint}; delete the endpoint before"
            f" taking the node out of pool {pool_id}",
            {"poolId": pool_id, "nodes": held, "endpoint": serving[held[0]].endpoint},
        )


def update_in(
    tx: FleetTx,
    pool_id: str,
    policy: Mapping[str, Any] | None,
    nodes: Sequence[str] | None,
    generation: int | None,
    mode: str | None,
    now: datetime,
) -> PoolView:
    """Change a pool inside the caller's transaction: the one path every pool change takes.

    Raises `Raced` when another writer bumped the generation since it was read here."""
    pool = tx.pools.get(pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    check_mode_kept(pool_id, pool.mode, mode)
    current = pool.generation
    if generation is not None and generation != current:
        raise GenerationMismatch(
            f"pool {pool_id} is at generation {current}, not {generation}; read it again and retry",
            {"poolId": pool_id, "generation": current, "expected": generation},
        )
    old = pool.settings
    old_members = _members(tx, pool_id)
    new_members = old_members if nodes is None else list(nodes)
    new = check_settings(
        pool.mode,
        {**old.as_mapping(), **(policy or {})},
        "pools.update",
        without_nodes=not new_members and bool(policy),
    )
    if nodes is not None:
        _check_nodes(tx, pool.cluster_id, new_members, pool_id)
    added = sorted(set(new_members) - set(old_members))
    removed = sorted(set(old_members) - set(new_members))
    serving = tx.endpoints.instances_of_nodes(old_members)
    check_not_serving(pool_id, removed, serving)
    layout_changed = pool.mode == "mig" and new.layout != old.layout
    if pool.mode == "mig":
        check_layout_fits(tx.gpus.of_nodes(new_members if layout_changed else added), new.layout)
    if not tx.pools.compare_and_set(pool_id, current, new):
        raise Raced
    touched = set(added) | set(removed)
    slots_changed = pool.mode in SLOT_MODES and new.replicas != old.replicas
    gated = layout_changed or slots_changed
    # Node reports derive these nodes' atoms from their membership: they wait for this change. The
    # gate's steps take the node locks too. All in one sorted batch: lockers never wait in a cycle.
    tx.nodes.lock(sorted(touched | (set(new_members) if gated else set())))
    if removed:
        tx.hooks.nodes_leaving(removed, now)  # the gate's holds on them go before re-deriving
    if added or removed:
        _set_members(tx, pool_id, new_members)
    rederive_nodes(tx, sorted(touched), now)
    if gated:
        # Each node kept keeps its shape until the gate grants it the new one: a slot count, as a
        # MIG layout, never changes under a holder (a booked slot would change size).
        # An endpoint's instance keeps the endpoint's layout (it goes back to the pool's when the
        # endpoint is deleted).
        kept = sorted(set(new_members) - set(added) - set(serving))
        old_shape, new_shape = pool_shape(pool), pool_shape(replace(pool, settings=new))
        assert new_shape is not None
        tx.hooks.pool_reshaped(pool_id, kept, old_shape, new_shape, now)
    if added and pool.mode == "mig" and new.layout is not None:
        tx.hooks.nodes_joined(pool_id, added, new.layout, now)
    if old.scrub == "none" and new.scrub != "none":
        # Scrubbing applies to what is released from now on: earlier holders owe nothing.
        tx.atoms.mark_scrubbed_pool(pool_id, now)
    tx.events.append(PoolUpdated(pool_id, current + 1, new.as_mapping(), tuple(added), tuple(removed)), now)
    if layout_changed:
        tx.events.append(MigLayoutRequested(pool_id, old.layout, new.layout, tuple(sorted(new_members))), now)
    return PoolView(replace(pool, settings=new, generation=current + 1), tuple(sorted(new_members)))


def offer(
    store: StorePort[FleetTx],
    principal: Principal,
    pool_id: str,
    tenant_id: str,
    quota: Mapping[str, int],
    now: datetime,
) -> list[Quota]:
    """Give a tenant quota rows in a pool (admin or the pool's owner); returns all its rows there.

    timeslice and mps pools are single-tenant (docs/concepts.md#quotas-iam-policies-and-tenancy):
    offering one to anyone but its owner is INVALID_STATE. mig and exclusive pools are offered freely.
    """
    check_ref(pool_id, "poolId")
    check_ref(tenant_id, "tenantId")
    limits = quotas.check_limits(quota, "quota")
    if not limits:
        raise InvalidInput("quota must give a limit for at least one atom class", {"field": "quota"})
    with store.begin() as tx:
        pool = quotas.pool_for_sharing(tx, principal, pool_id, "pools.offer")
        return quotas.grant(tx, principal, pool, tenant_id, limits, now, PoolOffered)


def delete(store: StorePort[FleetTx], principal: Principal, pool_id: str, now: datetime) -> PoolView:
    """Delete an empty pool (admin only): no nodes, no reservations (`pools.check_deletable`); its
    quota rows and policies go with it. Answers the pool as it was.

    The check and the delete are one transaction, and the delete is a compare-and-swap on the
    pool's generation, which a concurrent node change bumps first: the two cannot both succeed."""
    require_admin(principal, "pools.delete")
    check_ref(pool_id, "id")
    with store.begin() as tx:
        pool = tx.pools.get(pool_id)
        if pool is None:
            raise pool_not_found(pool_id)
        members = _members(tx, pool_id)
        check_deletable(pool_id, members, bool(tx.reservations.page(None, pool_id, 1, None)))
        if not tx.pools.remove(pool_id, pool.generation):
            raise ConcurrentChange(f"pool {pool_id} changed while it was deleted; retry", {"poolId": pool_id})
        tx.events.append(PoolDeleted(pool_id, pool.generation + 1), now)
        return PoolView(pool, ())
