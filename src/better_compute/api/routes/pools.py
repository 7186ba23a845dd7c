"""Pools: read endpoints (create, update and offer arrive with tenancy)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from better_compute.api.deps import StoreDep
from better_compute.service import inventory
from better_compute.wire.common import Page
from better_compute.wire.pools import PoolPublic

router = APIRouter(prefix="/v1", tags=["pools"])


def pool_public(r: dict[str, Any]) -> PoolPublic:
    return PoolPublic.model_validate(
        {
            "id": r["id"],
            "name": r["name"],
            "clusterId": r["cluster_id"],
            "mode": r["mode"],
            "policy": r["policy"],
            "ownerTenantId": r["owner_tenant_id"],
            "nodes": r["nodes"],
            "meter": r["meter"],
            "generation": r["generation"],
            "createdAt": r["created_at"],
        }
    )


@router.get("/pools", response_model=Page[PoolPublic])
def list_pools(store: StoreDep, cluster: str | None = None) -> dict[str, Any]:
    found = inventory.list_pools(store, filters={"cluster_id": cluster} if cluster else None)
    return {"items": [pool_public(r) for r in found], "nextCursor": None}


@router.get("/pools/{id}", response_model=PoolPublic)
def get_pool(id: str, store: StoreDep) -> PoolPublic:
    return pool_public(inventory.get_pool(store, id))
