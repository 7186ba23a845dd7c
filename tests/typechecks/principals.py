"""What mypy must refuse about principals: checked by `make lint` (mypy), never run.

Each `type: ignore[arg-type]` marks a call that must not type-check. mypy --strict reports an ignore
it does not need, so the day a `RecalledPrincipal` is accepted where a `Principal` is required (the
revocation check skipped), lint fails here.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.tenancy.credentials import Caller, Principal, RecalledPrincipal, require_admin
from better_compute.domain.tenancy.tenancy import sees_pool
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import credentials, tenants
from better_compute.service.tx import Tx


def a_recalled_principal_is_not_a_principal(
    store: StorePort[Tx], recalled: RecalledPrincipal, now: datetime
) -> None:
    require_admin(recalled, "tenants.create")  # type: ignore[arg-type]
    sees_pool(recalled, "platform", (), "h100")  # type: ignore[arg-type]
    tenants.create(store, recalled, "acme", "ACME", now)  # type: ignore[arg-type]
    reservations.get(store, recalled, "rsv-1", now)  # type: ignore[arg-type]
    reservations.cancel(store, recalled, "rsv-1", now)  # type: ignore[arg-type]
    credentials.revoke(store, recalled, "cred-1", now)  # type: ignore[arg-type]


def nor_is_a_caller_that_may_be_one(store: StorePort[Tx], caller: Caller, now: datetime) -> None:
    reservations.get(store, caller, "rsv-1", now)  # type: ignore[arg-type]


def confirming_it_is_the_way_to_a_principal(tx: Tx, recalled: RecalledPrincipal, live: bool) -> Principal:
    credentials.confirm_live(tx, recalled)
    return recalled.confirm(live)


def a_principal_may_act_where_a_caller_may(store: StorePort[Tx], principal: Principal, now: datetime) -> None:
    reservations.create(store, BookingIndex(), principal, {}, now, lambda: "rsv-1")
