"""Pools: creating them, changing their policy or nodes, and offering them to other tenants.

A pool's sharing mode decides what its GPUs become (SPEC 2.1), so it is fixed at creation; its policy
(`replicas`, `migLayout`) and its nodes may change. Every change bumps the pool's `generation`, and a
change that decided on a stale snapshot is caught by compare-and-swap: retried when the race was the
server's own, CONFLICT when the client named the generation it had read.

Visibility: the admin sees every pool; a tenant sees the pools it owns and those it has quota rows in.
Any other pool is NOT_FOUND to it, exactly like a pool that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from better_compute.domain import layouts
from better_compute.domain.credentials import Principal, require_admin
from better_compute.domain.errors import (
    AlreadyExists,
    ConcurrentChange,
    GenerationMismatch,
    InvalidInput,
    InvalidState,
    NotFound,
)
from better_compute.domain.fleet import check_policy, default_meter
from better_compute.domain.pools import check_mode
from better_compute.domain.tenancy import (
    check_name,
    check_ref,
    check_slug,
    pool_not_found,
    sees_pool,
    tenant_not_found,
)
from better_compute.service import quotas
from better_compute.service.paging import Listing, page
from better_compute.service.ports import Row, StorePort, Tx
from better_compute.service.rederive import rederive_nodes

UPDATE_ATTEMPTS = 3
"""How often an update that lost a race the client did not ask about is retried on a fresh snapshot."""


class _Raced(Exception):
    """Another writer bumped the pool's generation between our read and our write."""


def _members(tx: Tx, pool_id: str) -> list[str]:
    return sorted(m["node_id"] for m in tx.inventory.list("pool_nodes", filters={"pool_id": pool_id}))


def _visible(tx: Tx, principal: Principal) -> list[Row]:
    pools = tx.inventory.list("pools")
    if not principal.is_admin:
        mine = quotas.quota_pool_ids(tx, principal.tenant_id)
        pools = [p for p in pools if sees_pool(principal, p["owner_tenant_id"], mine, p["id"])]
    return pools


def visible_pool_ids(store: StorePort, principal: Principal) -> set[str] | None:
    """The ids of the pools the caller may see; None means every pool (the admin)."""
    if principal.is_admin:
        return None
    with store.read() as tx:
        return {p["id"] for p in _visible(tx, principal)}


def _get_visible(tx: Tx, principal: Principal, pool_id: str) -> Row:
    pool = tx.inventory.get("pools", pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    if not principal.is_admin and not sees_pool(
        principal, pool["owner_tenant_id"], quotas.quota_pool_ids(tx, principal.tenant_id), pool_id
    ):
        raise pool_not_found(pool_id)
    pool["nodes"] = _members(tx, pool_id)
    return pool


def get_pool(store: StorePort, principal: Principal, pool_id: str) -> Row:
    """One pool with its nodes, if the caller may see it."""
    with store.read() as tx:
        return _get_visible(tx, principal, pool_id)


def list_pools(
    store: StorePort,
    principal: Principal,
    *,
    cluster_id: str | None = None,
    owner_tenant_id: str | None = None,
    mode: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing:
    """The pools the caller may see, filtered, each with its nodes."""
    wanted = {"cluster_id": cluster_id, "owner_tenant_id": owner_tenant_id, "mode": mode}
    with store.read() as tx:
        found = [p for p in _visible(tx, principal) if all(v is None or p[k] == v for k, v in wanted.items())]
        members = tx.inventory.list("pool_nodes") if found else []
    by_pool: dict[str, list[str]] = {}
    for m in members:
        by_pool.setdefault(m["pool_id"], []).append(m["node_id"])
    for pool in found:
        pool["nodes"] = sorted(by_pool.get(pool["id"], []))
    return page(found, lambda r: str(r["id"]), limit, after)


def _check_nodes(tx: Tx, cluster_id: str, node_ids: Sequence[str], pool_id: str | None) -> None:
    """Nodes must exist, sit in the pool's cluster and belong to no other pool."""
    for node in node_ids:
        check_ref(node, "nodes")
    seen: set[str] = set()
    for node in node_ids:
        if node in seen:
            raise InvalidInput(f"nodes: {node} is listed twice", {"field": "nodes", "node": node})
        seen.add(node)
    known = tx.inventory.nodes_by_id(node_ids)
    for node in node_ids:
        if node not in known:
            raise NotFound(f"node {node} not found", {"node": node})
        if known[node]["cluster_id"] != cluster_id:
            raise InvalidInput(
                f"node {node} is in cluster {known[node]['cluster_id']}, not in the pool's cluster "
                f"{cluster_id}",
                {"field": "nodes", "node": node, "clusterId": known[node]["cluster_id"]},
            )
    for node, other in sorted(tx.inventory.pools_of_nodes(node_ids).items()):
        if other["id"] != pool_id:
            raise InvalidState(
                f"node {node} already belongs to pool {other['id']}; a node is in at most one pool",
                {"node": node, "poolId": other["id"]},
            )


def _check_layout(tx: Tx, node_ids: Sequence[str], layout: str) -> None:
    """The layout must place on every GPU model of these nodes (checked per model, named per node)."""
    checked: set[str] = set()
    for gpu in sorted(tx.inventory.gpus_of_nodes(node_ids), key=lambda g: (g["node_id"], g["gpu_index"])):
        if not gpu["present"]:
            continue
        model = gpu["model"]
        if model is None:
            if layout != "all-disabled":
                raise InvalidInput(
                    f"policy.migLayout: node {gpu['node_id']} has a GPU the catalog does not know "
                    f"({gpu['product']}), so {layout} cannot be checked on it",
                    {"field": "policy.migLayout", "node": gpu["node_id"], "product": gpu["product"]},
                )
            continue
        if model in checked:
            continue
        try:
            layouts.validate(layout, model)
        except InvalidInput as exc:
            raise type(exc)(
                f"policy.migLayout on node {gpu['node_id']} ({model}): {exc.message}",
                {**exc.details, "field": "policy.migLayout", "node": gpu["node_id"]},
            ) from exc
        checked.add(model)


def _set_members(tx: Tx, pool_id: str, node_ids: Sequence[str]) -> None:
    tx.inventory.set_pool_nodes(pool_id, [])
    added = tx.inventory.insert_new("pool_nodes", [{"pool_id": pool_id, "node_id": n} for n in node_ids])
    if added != len(node_ids):
        raise ConcurrentChange(
            "another pool took one of these nodes meanwhile; read the pools again and retry"
        )


def _first_model(tx: Tx, node_ids: Sequence[str]) -> str | None:
    models = sorted(g["model"] for g in tx.inventory.gpus_of_nodes(node_ids) if g["model"])
    return models[0] if models else None


def create(
    store: StorePort,
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
) -> Row:
    """Create a pool over nodes of one cluster (admin only); its id is its name.

    `ownerQuota` writes the owner's rows (without it the owner has whole GPUs only). The nodes' atoms
    are re-derived at once, so the pool is bookable as soon as this returns.
    """
    require_admin(principal, "pools.create")
    pool_id = check_slug(name, "name")
    sharing = check_mode(mode)
    checked_policy = check_policy(sharing, policy or {}, "pools.create")
    owner_limits = quotas.check_limits(owner_quota, "ownerQuota") if owner_quota is not None else {}
    check_ref(cluster_id, "clusterId")
    check_ref(owner_tenant_id, "ownerTenantId")
    members = list(nodes)
    with store.begin() as tx:
        if tx.inventory.get("pools", pool_id) is not None:
            raise AlreadyExists(f"pool {pool_id} already exists", {"poolId": pool_id})
        if tx.inventory.get("tenants", owner_tenant_id) is None:
            raise tenant_not_found(owner_tenant_id)
        if tx.inventory.get("clusters", cluster_id) is None:
            raise NotFound(f"cluster {cluster_id} not found", {"clusterId": cluster_id})
        _check_nodes(tx, cluster_id, members, None)
        if sharing == "mig":
            _check_layout(tx, members, checked_policy["migLayout"])
        row: Row = {
            "id": pool_id,
            "name": pool_id,
            "cluster_id": cluster_id,
            "owner_tenant_id": owner_tenant_id,
            "mode": sharing,
            "policy": checked_policy,
            "meter": check_name(meter, "meter", 64)
            if meter is not None
            else default_meter(sharing, _first_model(tx, members)),
            "generation": 1,
            "created_at": now,
        }
        if tx.inventory.insert_new("pools", [row]) != 1:
            raise AlreadyExists(f"pool {pool_id} already exists", {"poolId": pool_id})
        _set_members(tx, pool_id, members)
        if owner_limits:
            quotas.write_rows(tx, owner_tenant_id, pool_id, owner_limits, now)
        tx.events.append(
            "pool.created",
            pool_id,
            {"mode": sharing, "policy": checked_policy, "nodes": members, "ownerTenantId": owner_tenant_id},
            now,
        )
        rederive_nodes(tx, members, now)
    return {**row, "nodes": sorted(members)}


def update(
    store: StorePort,
    principal: Principal,
    pool_id: str,
    *,
    policy: Mapping[str, Any] | None = None,
    nodes: Sequence[str] | None = None,
    generation: int | None = None,
    mode: str | None = None,
    now: datetime,
) -> Row:
    """Change a pool's policy and/or nodes (admin only); every update bumps `generation`.

    A new `replicas` re-derives the slots at once (refused while a booking holds a slot that would
    go). A new `migLayout` is validated on every node's GPU model and recorded, with the event
    `pool.mig_layout.requested`; repartitioning is the MIG layout gate's job, never done here.
    """
    require_admin(principal, "pools.update")
    check_ref(pool_id, "id")
    for _ in range(UPDATE_ATTEMPTS):
        try:
            with store.begin() as tx:
                return _update_once(tx, pool_id, policy, nodes, generation, mode, now)
        except _Raced:
            if generation is not None:
                raise GenerationMismatch(
                    f"pool {pool_id} changed while this update was applied; read it again and retry",
                    {"poolId": pool_id, "expected": generation},
                ) from None
    raise ConcurrentChange(f"pool {pool_id} kept changing under this update; try again", {"poolId": pool_id})


def _update_once(
    tx: Tx,
    pool_id: str,
    policy: Mapping[str, Any] | None,
    nodes: Sequence[str] | None,
    generation: int | None,
    mode: str | None,
    now: datetime,
) -> Row:
    pool = tx.inventory.get("pools", pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    sharing = check_mode(pool["mode"])
    if mode is not None and mode != sharing:
        raise InvalidInput(
            f"a pool's sharing mode is fixed at creation: pool {pool_id} is {sharing}; "
            f"create another pool for {mode}",
            {"field": "mode", "mode": sharing},
        )
    current = int(pool["generation"])
    if generation is not None and generation != current:
        raise GenerationMismatch(
            f"pool {pool_id} is at generation {current}, not {generation}; read it again and retry",
            {"poolId": pool_id, "generation": current, "expected": generation},
        )
    old_policy: dict[str, Any] = dict(pool["policy"] or {})
    new_policy = check_policy(sharing, {**old_policy, **(policy or {})}, "pools.update")
    old_members = _members(tx, pool_id)
    new_members = old_members if nodes is None else list(nodes)
    if nodes is not None:
        _check_nodes(tx, pool["cluster_id"], new_members, pool_id)
    added = sorted(set(new_members) - set(old_members))
    removed = sorted(set(old_members) - set(new_members))
    old_layout = str(old_policy.get("migLayout", "all-disabled"))
    layout_changed = sharing == "mig" and new_policy["migLayout"] != old_layout
    if sharing == "mig":
        _check_layout(tx, new_members if layout_changed else added, new_policy["migLayout"])
    if not tx.inventory.compare_and_set(
        "pools", pool_id, {"generation": current}, {"policy": new_policy, "generation": current + 1}
    ):
        raise _Raced
    touched = set(added) | set(removed)
    if new_policy.get("replicas") != old_policy.get("replicas"):
        touched |= set(new_members)
    # Node reports derive these nodes' atoms from their membership: they wait for this change.
    tx.inventory.lock_nodes(sorted(touched))
    if added or removed:
        _set_members(tx, pool_id, new_members)
    rederive_nodes(tx, sorted(touched), now)
    tx.events.append(
        "pool.updated",
        pool_id,
        {"generation": current + 1, "policy": new_policy, "added": added, "removed": removed},
        now,
    )
    if layout_changed:
        tx.events.append(
            "pool.mig_layout.requested",
            pool_id,
            {"from": old_layout, "to": new_policy["migLayout"], "nodes": sorted(new_members)},
            now,
        )
    return {**pool, "policy": new_policy, "generation": current + 1, "nodes": sorted(new_members)}


def offer(
    store: StorePort,
    principal: Principal,
    pool_id: str,
    tenant_id: str,
    quota: Mapping[str, int],
    now: datetime,
) -> list[Row]:
    """Give a tenant quota rows in a pool (admin or the pool's owner); returns all its rows there.

    timeslice and mps pools are single-tenant (SPEC 4): offering one to anyone but its owner is
    INVALID_STATE. mig and exclusive pools are offered freely.
    """
    check_ref(pool_id, "poolId")
    check_ref(tenant_id, "tenantId")
    limits = quotas.check_limits(quota, "quota")
    if not limits:
        raise InvalidInput("quota must give a limit for at least one atom class", {"field": "quota"})
    with store.begin() as tx:
        pool = quotas.pool_for_sharing(tx, principal, pool_id, "pools.offer")
        return quotas.grant(tx, principal, pool, tenant_id, limits, now, "pool.offered")
