"""Read endpoints of the fleet: clusters, nodes, GPUs and atoms."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import CursorQ, LimitQ, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.atoms import attribute_filters, check_atom_class
from better_compute.service import inventory, pools
from better_compute.wire.common import Page
from better_compute.wire.inventory import AtomPublic, ClusterPublic, GpuPublic, NodePublic

router = APIRouter(prefix="/v1", tags=["inventory"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


def _page(items: list[Any], limit: int, last_id: str | None) -> dict[str, Any]:
    return {"items": items, "nextCursor": last_id if len(items) >= limit else None}


@router.get("/clusters", response_model=Page[ClusterPublic])
def list_clusters(store: StoreDep, limit: LimitQ = 100, cursor: CursorQ = None) -> dict[str, Any]:
    found = inventory.list_rows(store, "clusters", limit=limit, after=cursor)
    items = [
        ClusterPublic(name=r["id"], **{k: r[k] for k in ("id", "region", "residency", "phase", "created_at")})
        for r in found
    ]
    return _page(items, limit, found[-1]["id"] if found else None)


@router.get("/nodes", response_model=Page[NodePublic])
def list_nodes(
    store: StoreDep,
    principal: PrincipalDep,
    cluster: str | None = None,
    limit: LimitQ = 100,
    cursor: CursorQ = None,
) -> dict[str, Any]:
    found = inventory.list_nodes(
        store, cluster=cluster, limit=limit, after=cursor, pools=pools.visible_pool_ids(store, principal)
    )
    items = [
        NodePublic(
            id=r["id"],
            name=r["id"],
            cluster_id=r["cluster_id"],
            pool_id=r["pool_id"],
            cordoned=r["cordoned"],
            spec_generation=r["spec_generation"],
            observed_generation=r["observed_generation"],
            last_report_at=r["last_report_at"],
        )
        for r in found
    ]
    return _page(items, limit, found[-1]["id"] if found else None)


@router.get("/gpus", response_model=Page[GpuPublic])
def list_gpus(
    store: StoreDep, node: str | None = None, limit: LimitQ = 100, cursor: CursorQ = None
) -> dict[str, Any]:
    found = inventory.list_gpus(store, node=node, limit=limit, after=cursor)
    items = [
        GpuPublic.model_validate(
            {
                "id": r["id"],
                "uuid": r["id"],
                "node": r["node_id"],
                "index": r["gpu_index"],
                "product": r["product"],
                "model": r["model"],
                "memoryMiB": r["memory_mib"],
                "numaNode": r["numa_node"],
                "nvlinkPeers": r["nvlink_peers"],
                "healthy": r["healthy"],
                "present": r["present"],
                "migMode": {"current": r["mig_mode_current"], "pending": r["mig_mode_pending"]},
                "migInstances": r["mig_instances"],
            }
        )
        for r in found
    ]
    return _page(items, limit, found[-1]["id"] if found else None)


def atom_public(r: dict[str, Any]) -> AtomPublic:
    return AtomPublic(
        id=r["id"],
        cls=r["class"],
        gpu_id=r["gpu_id"],
        node=r["node_id"],
        pool_id=r["pool_id"],
        bookable=r["bookable"],
        partition_pending=r["partition_pending"],
        present=r["present"],
        attributes=r["attributes"],
    )


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
) -> dict[str, Any]:
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
    return _page([atom_public(r) for r in found], limit, found[-1]["id"] if found else None)
