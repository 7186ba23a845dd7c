"""`bills.get`: a tenant's GPU-hours per meter in a period, priced where the meter has a price.

The hours are summed by the database per (pool, share) over the ledger's bookings
(`storage.metering.usage`), then made exact GPU-hours and rated by the domain (`domain.metering.metering`,
`domain.metering.billing`): a bill never loads its bookings one by one, and always agrees with `usage.list`
over the same period. Its `showback` splits the tenant's endpoints' cost over their components, from
the spans each copy held a partition (`domain.metering.showback`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from better_compute.domain.metering.billing import Bill, period, rate
from better_compute.domain.metering.metering import hours_by_meter
from better_compute.domain.metering.showback import showback
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, tenant_not_found, tenant_scope
from better_compute.service.kernel.ports import StorePort
from better_compute.service.metering.ports import MeteringTx


def get_bill(
    store: StorePort[MeteringTx],
    principal: Principal,
    tenant_id: str,
    *,
    since: str | None = None,
    until: str | None = None,
    now: datetime,
) -> Bill:
    """The bill of `tenant_id` for `[since, until)` (both None: this calendar month). A tenant token
    asking for another tenant's bill is NOT_FOUND, as for every other tenant's thing."""
    check_ref(tenant_id, "tenantId")
    scope = tenant_scope(principal, tenant_id)
    assert scope is not None, "a bill names its tenant"
    within = period(since, until, now)
    with store.read() as tx:
        if tx.tenants.get(scope) is None:
            raise tenant_not_found(scope)
        totals = tx.usage.totals(within, now, scope, None)
        meters = {p.id: p.meter for p in tx.pools.all()}
        prices = {p.meter: p for p in tx.prices.all()}
        copies = tx.usage.copy_totals(within, now, scope)
    bill = rate(scope, within, hours_by_meter(totals, meters), prices)
    return replace(bill, showback=showback(copies))
