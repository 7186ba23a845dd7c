"""Read endpoints of the fleet: clusters, nodes, GPUs and atoms."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.convert import atom_public, cluster_public, gpu_public, node_public, paged
from better_compute.api.deps import CursorQ, LimitQ, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.atoms import attribute_filters, check_atom_class
from better_compute.service import inventory, pools
from better_compute.wire.common import Page
from better_compute.wire.inventory import AtomPublic, ClusterPublic, GpuPublic, NodePublic

router = APIRouter(prefix="/v1", tags=["inventory"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.get("/clusters", response_model=Page[ClusterPublic])
def list_clusters(store: StoreDep, limit: LimitQ = 100, cursor: CursorQ = None) -> Page[ClusterPublic]:
    return paged(inventory.list_clusters(store, limit=limit, after=cursor), cluster_public)


@router.get("/nodes", response_model=Page[NodePublic])
def list_nodes(
    store: StoreDep,
    principal: PrincipalDep,
    cluster: str | None = None,
    limit: LimitQ = 100,
    cursor: CursorQ = None,
) -> Page[NodePublic]:
    found = inventory.list_nodes(
        store, cluster=cluster, limit=limit, after=cursor, pools=pools.visible_pool_ids(store, principal)
    )
    return paged(found, node_public)


@router.get("/gpus", response_model=Page[GpuPublic])
def list_gpus(
    store: StoreDep, node: str | None = None, limit: LimitQ = 100, cursor: CursorQ = None
) -> Page[GpuPublic]:
    return paged(inventory.list_gpus(store, node=node, limit=limit, after=cursor), gpu_public)


@router.get("/atoms", response_model=Page[AtomPublic])
def list_atoms(
    store: StoreDep,
    principal: PrincipalDep,
    pool: str | None = None,
    cls: Annotated[str | None, Query(alias="class")] = None,
    attr: Annotated[list[str] | None, Query(description="Attribute filter `key=value`, repeatable.")] = None,
    bookable: bool | None = None,
    limit: LimitQ = 100,
    cursor: CursorQ = None,
) -> Page[AtomPublic]:
    found = inventory.list_atoms(
        store,
        pool=pool,
        cls=None if cls is None else check_atom_class(cls, "class"),
        attributes=attribute_filters(attr or []),
        bookable=bookable,
        limit=limit,
        after=cursor,
        pools=pools.visible_pool_ids(store, principal),
    )
    return paged(found, atom_public)
