"""Prices per meter: `prices.set` (admin) and `prices.list` (anyone with a token: a tenant's bill
shows what its hours cost, so the prices are no secret to it)."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.metering.billing import Price, check_currency, check_per_hour
from better_compute.domain.metering.events import PriceSet
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_name
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.metering.ports import MeteringTx

MAX_METER = 64
"""The longest meter name, as a pool's `meter` is."""


def set_price(
    store: StorePort[MeteringTx],
    principal: Principal,
    meter: str,
    per_hour: str,
    currency: str,
    now: datetime,
) -> Price:
    """Set the price of one hour of `meter` (admin only). It prices every bill read afterwards, for
    any period: a price has no history here (docs/billing.md#prices)."""
    require_admin(principal, "prices.set")
    price = Price(
        meter=check_name(meter, "meter", MAX_METER),
        per_hour=check_per_hour(per_hour),
        currency=check_currency(currency),
        updated_at=now,
    )
    with store.begin() as tx:
        tx.prices.put(price)
        tx.events.append(PriceSet(price.meter, price.per_hour, price.currency), now)
    return price


def list_prices(
    store: StorePort[MeteringTx], principal: Principal, *, limit: int | None = None, after: str | None = None
) -> Listing[Price]:
    """Prices by meter name."""
    del principal  # any authenticated caller
    with store.read() as tx:
        return page(tx.prices.all(), lambda p: p.meter, limit, after)
