"""Read endpoints of the fleet: clusters, nodes, GPUs and atoms."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.convert import atom_public, cluster_public, gpu_public, node_public, paged
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.atoms import attribute_filters, check_atom_class
from better_compute.service import capacity, inventory, pools
from better_compute.wire.common import Page
from better_compute.wire.inventory import (
    AtomListQuery,
    AtomPublic,
    ClusterListQuery,
    ClusterPublic,
    GpuListQuery,
    GpuPublic,
    NodeListQuery,
    NodePublic,
)

router = APIRouter(prefix="/v1", tags=["inventory"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.get("/clusters", response_model=Page[ClusterPublic])
def list_clusters(q: Annotated[ClusterListQuery, Query()], store: StoreDep) -> Page[ClusterPublic]:
    return paged(inventory.list_clusters(store, limit=q.limit, after=q.cursor), cluster_public)


@router.get("/nodes", response_model=Page[NodePublic])
def list_nodes(
    q: Annotated[NodeListQuery, Query()], store: StoreDep, principal: PrincipalDep
) -> Page[NodePublic]:
    found = inventory.list_nodes(
        store,
        cluster=q.cluster,
        limit=q.limit,
        after=q.cursor,
        pools=pools.visible_pool_ids(store, principal),
    )
    return paged(found, node_public)


@router.get("/gpus", response_model=Page[GpuPublic])
def list_gpus(q: Annotated[GpuListQuery, Query()], store: StoreDep) -> Page[GpuPublic]:
    return paged(inventory.list_gpus(store, node=q.node, limit=q.limit, after=q.cursor), gpu_public)


@router.get("/atoms", response_model=Page[AtomPublic])
def list_atoms(
    q: Annotated[AtomListQuery, Query()], store: StoreDep, principal: PrincipalDep, now: NowDep
) -> Page[AtomPublic]:
    found = inventory.list_atoms(
        store,
        pool=q.pool,
        cls=None if q.cls is None else check_atom_class(q.cls, "class"),
        attributes=attribute_filters(q.attr or []),
        bookable=q.bookable,
        limit=q.limit,
        after=q.cursor,
        pools=pools.visible_pool_ids(store, principal),
    )
    free = capacity.availability_of(store, found.items, now)
    pending = capacity.scrub_pending_of(store, principal, found.items, now)
    return paged(found, lambda a: atom_public(a, free.get(a.id), scrub_pending=a.id in pending))
