"""Prices per meter: `prices.set` (admin) and `prices.list`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.metering.billing import Price
from better_compute.service.metering import prices
from better_compute.wire.billing import PriceListQuery, PricePublic, PriceSet
from better_compute.wire.common import Page

router = APIRouter(prefix="/v1", tags=["billing"], route_class=StrictQueryRoute)


@router.put("/prices", response_model=PricePublic)
def set_price(body: PriceSet, principal: PrincipalDep, store: StoreDep, now: NowDep) -> PricePublic:
    return price_public(prices.set_price(store, principal, body.meter, body.per_hour, body.currency, now))


@router.get("/prices", response_model=Page[PricePublic])
def list_prices(
    q: Annotated[PriceListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[PricePublic]:
    return paged(prices.list_prices(store, principal, limit=q.limit, after=q.cursor), price_public)


def price_public(p: Price) -> PricePublic:
    return PricePublic(meter=p.meter, per_hour=p.per_hour, currency=p.currency, updated_at=p.updated_at)
