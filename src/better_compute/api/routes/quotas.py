"""Quotas: `quotas.set` (a pool row: admin or the pool's owner; a device-class row: admin) and
`quotas.list` (both kinds; a tenant sees its own rows)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.timewin import window_asked
from better_compute.domain.placement.class_quotas import ClassQuota, check_pool_row, is_class_row
from better_compute.domain.tenancy.records import Quota
from better_compute.service.placement import class_quotas
from better_compute.service.tenancy import quotas
from better_compute.wire.common import Page
from better_compute.wire.quotas import QuotaListQuery, QuotaPublic, QuotaSet

router = APIRouter(prefix="/v1", tags=["quotas"], route_class=StrictQueryRoute)


@router.put("/quotas", response_model=QuotaPublic)
def set_quota(body: QuotaSet, principal: PrincipalDep, store: StoreDep, now: NowDep) -> QuotaPublic:
    named = body.named()
    if is_class_row(named, body.scope):
        row = class_quotas.set_class_quota(
            store,
            principal,
            tenant_id=body.tenant_id,
            device_class=body.device_class,
            scope=body.scope,
            cluster_id=body.cluster_id,
            guaranteed_devices=body.guaranteed_devices,
            floor_devices=body.floor_devices,
            over_quota_weight=body.over_quota_weight,
            now=now,
            given=named,
        )
        return quota_public(row)
    check_pool_row(named, body.pool_id, body.cls, body.limit)
    assert body.pool_id is not None and body.cls is not None and body.limit is not None
    pool_row = quotas.set_quota(store, principal, body.tenant_id, body.pool_id, body.cls, body.limit, now)
    return quota_public(pool_row)


@router.get("/quotas", response_model=Page[QuotaPublic])
def list_quotas(
    q: Annotated[QuotaListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[QuotaPublic]:
    window = None if q.from_ is None and q.to is None else window_asked(q.from_, q.to, now)
    found = quotas.list_quotas(
        store,
        principal,
        tenant_id=q.tenant_id,
        pool_id=q.pool_id,
        device_class=q.device_class,
        scope=q.scope,
        cluster_id=q.cluster_id,
        limit=q.limit,
        after=q.cursor,
        now=now,
        window=window,
    )
    return paged(found, lambda row: quota_public(row.quota, row.used))


def quota_public(q: Quota | ClassQuota, used: int | None = None) -> QuotaPublic:
    if isinstance(q, ClassQuota):
        return QuotaPublic.model_validate(
            {
                "tenantId": q.tenant_id,
                "scope": q.scope,
                "deviceClass": q.device_class,
                "clusterId": q.cluster_id,
                "guaranteedDevices": q.guaranteed_devices,
                "floorDevices": q.floor_devices,
                "overQuotaWeight": q.over_quota_weight,
                "used": used,
            }
        )
    return QuotaPublic.model_validate(
        {"tenantId": q.tenant_id, "poolId": q.pool_id, "class": q.cls, "limit": q.limit, "used": used}
    )
