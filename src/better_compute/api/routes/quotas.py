"""Quotas: `quotas.set` (admin or the pool's owner) and `quotas.list` (a tenant sees its own rows)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.convert import paged, quota_public
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.timewin import window_asked
from better_compute.service import quotas
from better_compute.wire.common import Page
from better_compute.wire.quotas import QuotaListQuery, QuotaPublic, QuotaSet

router = APIRouter(prefix="/v1", tags=["quotas"], route_class=StrictQueryRoute)


@router.put("/quotas", response_model=QuotaPublic)
def set_quota(body: QuotaSet, principal: PrincipalDep, store: StoreDep, now: NowDep) -> QuotaPublic:
    row = quotas.set_quota(store, principal, body.tenant_id, body.pool_id, body.cls, body.limit, now)
    return quota_public(row)


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
        limit=q.limit,
        after=q.cursor,
        now=now,
        window=window,
    )
    return paged(found, lambda row: quota_public(row.quota, row.used))
