"""`usage.list`: what tenants held in a period, one row per booking, read from the ledger.

A tenant token reads its own usage only (`domain.tenancy.tenancy.tenant_scope`); the admin reads every
tenant's, or one's. Rows come in booking id order, a page at a time, so an export of a month of
any size is read in bounded memory (docs/billing.md#limits).
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.metering.billing import period
from better_compute.domain.metering.metering import Usage, check_cursor, usage_of
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, pool_not_found, tenant_not_found, tenant_scope
from better_compute.service.kernel.paging import DEFAULT_LIMIT, Listing, fetch
from better_compute.service.kernel.ports import StorePort
from better_compute.service.metering.ports import MeteringTx


def list_usage(
    store: StorePort[MeteringTx],
    principal: Principal,
    *,
    tenant_id: str | None = None,
    pool_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    now: datetime,
) -> Listing[Usage]:
    """Usage in `[since, until)` (both None: this calendar month), by tenant and pool when given,
    after the booking id `after`. The admin is told when a tenant or pool it names does not exist;
    a tenant naming another tenant is NOT_FOUND, and a pool filter only narrows its own usage, so
    no answer tells it which pools exist."""
    if tenant_id is not None:
        check_ref(tenant_id, "tenantId")
    if pool_id is not None:
        check_ref(pool_id, "poolId")
    scope = tenant_scope(principal, tenant_id)
    within = period(since, until, now)
    if after is not None:
        check_cursor(after)
    size = limit or DEFAULT_LIMIT
    with store.read() as tx:
        if principal.is_admin:
            if scope is not None and tx.tenants.get(scope) is None:
                raise tenant_not_found(scope)
            if pool_id is not None and tx.pools.get(pool_id) is None:
                raise pool_not_found(pool_id)
        found = tx.usage.bookings(within, now, scope, pool_id, after, fetch(limit))
    page = found[:size]
    rows = [u for u in (usage_of(b, within, now) for b in page) if u is not None]
    more = len(found) > size
    return Listing(rows, page[-1].booking_id if more and page else None)
