"""Pools: list and get (what the caller may see), create and update (admin), offer and preview a layout
(admin or owner)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from better_compute.api.answers import paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.path_ids import path_id
from better_compute.api.query import StrictQueryRoute
from better_compute.api.routes.quotas import quota_public
from better_compute.domain.gate.layout_preview import LayoutPreview, NodePreview
from better_compute.service.fleet import pools
from better_compute.service.fleet.pools import PoolView
from better_compute.service.gate import layout_preview as previews
from better_compute.wire.common import Page
from better_compute.wire.pools import (
    AppearingInstancePublic,
    LayoutCapacityPublic,
    LayoutChangeHoldPublic,
    LayoutHolderPublic,
    NodeLayoutChangePublic,
    NodeLayoutPreviewPublic,
    PoolCreate,
    PoolLayoutPreview,
    PoolLayoutPreviewRequest,
    PoolListQuery,
    PoolOffer,
    PoolOfferPublic,
    PoolPolicy,
    PoolPublic,
    PoolUpdate,
)

router = APIRouter(prefix="/v1", tags=["pools"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.get("/pools", response_model=Page[PoolPublic])
def list_pools(
    q: Annotated[PoolListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[PoolPublic]:
    found = pools.list_pools(
        store,
        principal,
        cluster_id=q.cluster_id,
        owner_tenant_id=q.owner_tenant_id,
        mode=q.mode,
        limit=q.limit,
        after=q.cursor,
    )
    return paged(found, pool_public)


@router.get("/pools/{id}", response_model=PoolPublic)
def get_pool(id: str, principal: PrincipalDep, store: StoreDep) -> PoolPublic:
    return pool_public(pools.get_pool(store, principal, id))


@router.post("/pools", response_model=PoolPublic, status_code=201)
def create_pool(body: PoolCreate, principal: PrincipalDep, store: StoreDep, now: NowDep) -> PoolPublic:
    view = pools.create(
        store,
        principal,
        name=body.name,
        cluster_id=body.cluster_id,
        mode=body.mode,
        owner_tenant_id=body.owner_tenant_id,
        nodes=body.nodes,
        policy=body.policy.model_dump(exclude_none=True),
        owner_quota=None if body.owner_quota is None else {str(k): v for k, v in body.owner_quota.items()},
        meter=body.meter,
        now=now,
    )
    return pool_public(view)


@router.patch("/pools/{id}", response_model=PoolPublic)
def update_pool(
    id: str, body: PoolUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> PoolPublic:
    id = path_id(id, body.id)
    # Unset fields keep their value; a field sent as null removes it (`"maxDuration": null`).
    policy = body.policy.model_dump(exclude_unset=True) if body.policy is not None else None
    if body.dry_run:
        plan = pools.plan_update(
            store, principal, id, policy=policy, nodes=body.nodes, generation=body.generation, now=now
        )
        changes = [
            NodeLayoutChangePublic.model_validate(
                {
                    "node": c.node,
                    "from": c.frozen,
                    "to": c.pending,
                    "heldUntil": c.held_until,
                    "openEnded": c.open_ended,
                    "tenants": list(c.tenants),
                }
            )
            for c in plan.changes
        ]
        return pool_public(plan.view).model_copy(update={"dry_run": True, "layout_changes": changes})
    view = pools.update(
        store, principal, id, policy=policy, nodes=body.nodes, generation=body.generation, now=now
    )
    return pool_public(view)


@router.post("/pools/{poolId}/offers", response_model=PoolOfferPublic)
def offer_pool(
    pool_id: Annotated[str, Path(alias="poolId")],
    body: PoolOffer,
    principal: PrincipalDep,
    store: StoreDep,
    now: NowDep,
) -> PoolOfferPublic:
    rows = pools.offer(
        store, principal, pool_id, body.tenant_id, {str(k): v for k, v in body.quota.items()}, now
    )
    quotas = [quota_public(q) for q in rows]
    return PoolOfferPublic(pool_id=pool_id, tenant_id=body.tenant_id, quotas=quotas)


@router.delete("/pools/{id}", response_model=PoolPublic)
def delete_pool(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> PoolPublic:
    return pool_public(pools.delete(store, principal, id, now))


@router.post("/pools/{id}/preview-layout", response_model=PoolLayoutPreview)
def preview_layout(
    id: str, body: PoolLayoutPreviewRequest, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> PoolLayoutPreview:
    # Reads only: the path's id is authoritative, as for every method with a body.
    return layout_preview(previews.preview(store, principal, id, body.mig_layout, now))


def pool_public(v: PoolView) -> PoolPublic:
    p = v.pool
    return PoolPublic(
        id=p.id,
        name=p.name,
        cluster_id=p.cluster_id,
        mode=p.mode,
        policy=PoolPolicy(
            mig_layout=p.settings.mig_layout,
            replicas=p.settings.replicas,
            max_duration=p.settings.max_duration,
            scrub=p.settings.scrub,
        ),
        owner_tenant_id=p.owner_tenant_id,
        nodes=list(v.nodes),
        meter=p.meter,
        generation=p.generation,
        created_at=p.created_at,
    )


def _node_layout_preview(n: NodePreview) -> NodeLayoutPreviewPublic:
    return NodeLayoutPreviewPublic(
        node=n.node,
        carries_pool_layout=n.carries_pool_layout,
        layout=n.layout,
        change_state=n.change_state,
        grantable_at=n.grantable_at,
        held_open_ended=n.held_open_ended,
        held_by=[
            LayoutHolderPublic(allocation_id=h.allocation_id, tenant_id=h.tenant_id, ends_at=h.ends_at)
            for h in n.held_by
        ],
        change_holds=[
            LayoutChangeHoldPublic(
                allocation_id=h.allocation_id, gpu_id=h.gpu_id, starts_at=h.starts_at, ends_at=h.ends_at
            )
            for h in n.change_holds
        ],
        disappear=list(n.disappear),
        appear=[
            AppearingInstancePublic(
                gpu_id=i.gpu_id,
                mig_profile=i.mig_profile,
                placement_start=i.placement_start,
                placement_size=i.placement_size,
            )
            for i in n.appear
        ],
        capacity=LayoutCapacityPublic(before=dict(n.before), after=dict(n.after)),
    )


def layout_preview(p: LayoutPreview) -> PoolLayoutPreview:
    return PoolLayoutPreview(
        pool_id=p.pool_id,
        from_=p.from_layout,
        to=p.to_layout,
        at=p.at,
        nodes=[_node_layout_preview(n) for n in p.nodes],
        capacity=LayoutCapacityPublic(before=dict(p.before), after=dict(p.after)),
    )
