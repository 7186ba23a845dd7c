"""Clusters and nodes as an operator steers them: `clusters.get`, `clusters.update` (a cluster's
phase) and `nodes.update` (a node's cordon), admin only for the writes (domain.fleet.clusters).

A cordon is recorded in the GPU state history in its own transaction (service.fleet.gpu_states), so
capacity accounting counts the node's free hours as `cordoned` from that moment. Its event makes
every booking index read its pools' atoms again, so no admission after it chooses the node's atoms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from better_compute.domain.fleet.cluster_kinds import check_cluster_kind
from better_compute.domain.fleet.clusters import (
    check_cordoned,
    check_phase,
    cluster_not_found,
    node_not_found,
)
from better_compute.domain.fleet.events import ClusterCreated, ClusterUpdated, NodeCordoned, NodeUncordoned
from better_compute.domain.fleet.records import Cluster
from better_compute.domain.kernel.errors import AlreadyExists, ConcurrentChange, InvalidInput
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_name, check_ref, check_slug
from better_compute.service.fleet.gpu_states import record_nodes
from better_compute.service.fleet.inventory import NodeView
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort


def get(store: StorePort[FleetTx], cluster_id: str) -> Cluster:
    """A cluster by id (any token: inventory is readable by every tenant); NOT_FOUND otherwise."""
    check_ref(cluster_id, "id")
    with store.read() as tx:
        found = tx.clusters.get(cluster_id)
    if found is None:
        raise cluster_not_found(cluster_id)
    return found


MAX_RESIDENCY = 32
"""At most this many residency tags on one cluster."""


def create(
    store: StorePort[FleetTx],
    principal: Principal,
    cluster_id: object,
    region: object,
    residency: Sequence[object],
    kind: object,
    slurm: Mapping[str, object] | None,
    now: datetime,
) -> Cluster:
    """Create an empty cluster (admin only), `local` or `slurm`; its nodes join it afterwards.
    An id taken is ALREADY_EXISTS; a `slurm` cluster's settings are checked field by field
    (domain.fleet.cluster_kinds)."""
    require_admin(principal, "clusters.create")
    new_id = check_slug(cluster_id, "id")
    checked_region = check_name(region, "region", 64)
    if len(residency) > MAX_RESIDENCY:
        raise InvalidInput(f"residency lists at most {MAX_RESIDENCY} tags", {"field": "residency"})
    tags = tuple(check_name(r, f"residency[{i}]", 64) for i, r in enumerate(residency))
    checked_kind, settings = check_cluster_kind(kind, slurm)
    cluster = Cluster(
        id=new_id,
        region=checked_region,
        residency=tags,
        phase="active",
        created_at=now,
        kind=checked_kind,
        slurm=settings,
    )
    with store.begin() as tx:
        for slurm_account, tenant in settings.accounts if settings is not None else ():
            if tx.tenants.get(tenant) is None:
                raise InvalidInput(
                    f"slurm.accounts maps {slurm_account} to tenant {tenant}, which does not exist",
                    {"field": f"slurm.accounts.{slurm_account}"},
                )
        if not tx.clusters.add(cluster):
            raise AlreadyExists(f"cluster {new_id} already exists", {"id": new_id})
        tx.events.append(ClusterCreated(new_id, checked_kind, checked_region), now)
    return cluster


def update(
    store: StorePort[FleetTx], principal: Principal, cluster_id: str, phase: object, now: datetime
) -> Cluster:
    """Set a cluster's phase (admin only); answers the cluster as written. Setting the phase it has
    writes nothing and appends no event."""
    require_admin(principal, "clusters.update")
    wanted = check_phase(phase)
    check_ref(cluster_id, "id")
    with store.begin() as tx:
        found = tx.clusters.get(cluster_id)
        if found is None:
            raise cluster_not_found(cluster_id)
        if found.phase == wanted:
            return found
        if not tx.clusters.set_phase(cluster_id, wanted, found.phase):
            raise ConcurrentChange(
                f"cluster {cluster_id} changed while this request ran; retry", {"id": cluster_id}
            )
        tx.events.append(ClusterUpdated(cluster_id, wanted, found.phase), now)
        return replace(found, phase=wanted)


def update_node(
    store: StorePort[FleetTx], principal: Principal, node_id: str, cordoned: object, now: datetime
) -> NodeView:
    """Cordon or uncordon a node (admin only); answers the node as written, with its pool. Bookings
    it holds stay; a cordoned node's atoms take no new booking. Setting the cordon it has writes
    nothing and appends no event."""
    require_admin(principal, "nodes.update")
    wanted = check_cordoned(cordoned)
    check_ref(node_id, "node")
    with store.begin() as tx:
        # The node's writers (reports, pool changes) hold it too: the history below is recorded
        # from what this transaction has written, and none of them writes between.
        tx.nodes.lock([node_id])
        node = tx.nodes.by_ids([node_id]).get(node_id)
        if node is None:
            raise node_not_found(node_id)
        pool = tx.pools.of_nodes([node_id]).get(node_id)
        if node.cordoned != wanted:
            tx.nodes.set_cordoned(node_id, wanted)
            record_nodes(tx, [node_id], now)
            tx.events.append(NodeCordoned(node_id) if wanted else NodeUncordoned(node_id), now)
            node = replace(node, cordoned=wanted)
        return NodeView(node, pool.id if pool else None)
