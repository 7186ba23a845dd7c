"""Quota rows: (tenant, pool, atom class) -> limit. Set by the admin or the pool's owner. The same
resource holds device-class rows (`service.placement.class_quotas`, admin only); `list_quotas` lists both.

Setting a row is how a tenant gets into a pool, so it obeys the same single-tenant rule as
`pools.offer`: a timeslice or mps pool takes rows for its owner only (`domain.ledger.admission.check_offer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.records import Pool
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.admission import check_offer
from better_compute.domain.placement.class_quotas import SCOPES, ClassQuota, used_by
from better_compute.domain.tenancy import quota
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.events import PoolOffered, QuotaSet
from better_compute.domain.tenancy.quota import parse_quota_limits
from better_compute.domain.tenancy.records import Quota
from better_compute.domain.tenancy.tenancy import (
    check_grantee,
    check_ref,
    granted_rows_shown,
    pool_not_found,
    require_pool_owner,
    tenant_scope,
)
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.class_quotas import held_by_class
from better_compute.service.tenancy.ports import TenancyTx


def quota_lock(tenant_id: str, pool_id: str) -> str:
    """The lock a tenant's writes in a pool are serialised on: admission, cancel, release and
    extend take it, and so does `tenants.delete` for every pool the tenant has quota in."""
    return f"quota:{tenant_id}:{pool_id}"


def quota_pool_ids(tx: TenancyTx, tenant_id: str | None) -> set[str]:
    """Pools the tenant has quota rows in."""
    if tenant_id is None:
        return set()
    return {q.pool_id for q in tx.quotas.find(tenant_id, None)}


def pool_for_sharing(tx: TenancyTx, principal: Principal, pool_id: str, action: str) -> Pool:
    """The pool the caller hands out access to: it must exist, be visible, and be the caller's own."""
    pool = tx.pools.get(pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    visible = principal.is_admin or pool_id in quota_pool_ids(tx, principal.tenant_id)
    require_pool_owner(principal, pool_id, pool.owner_tenant_id, visible, action)
    return pool


def check_limits(raw: Mapping[str, object], field: str) -> dict[str, int]:
    """A per-class quota map with known classes and storable limits (the rule is domain.tenancy.quota's)."""
    return {str(cls): limit for cls, limit in parse_quota_limits(raw, field).items()}


def write_rows(tx: TenancyTx, tenant_id: str, pool_id: str, limits: Mapping[str, int], now: datetime) -> None:
    """Create or replace the tenant's rows in the pool, one per class given."""
    tx.quotas.put([Quota(tenant_id, pool_id, cls, limit, now) for cls, limit in sorted(limits.items())])


def grant(
    tx: TenancyTx,
    principal: Principal,
    pool: Pool,
    tenant_id: str,
    limits: Mapping[str, int],
    now: datetime,
    event: type[QuotaSet | PoolOffered],
) -> list[Quota]:
    """Give `tenant_id` rows in `pool` after the single-tenant check; returns its rows there (to a
    pool owner, only those just written).

    The admin is told when the tenant does not exist; a pool owner is not (`check_grantee`), so that
    the answer does not reveal which tenant ids exist."""
    check_grantee(principal, tenant_id, exists=tx.tenants.hold(tenant_id) is not None)
    check_offer(pool.mode, pool.owner_tenant_id, tenant_id)
    write_rows(tx, tenant_id, pool.id, limits, now)
    tx.events.append(event(pool.id, tenant_id, dict(limits)), now)
    return granted_rows_shown(principal, tx.quotas.find(tenant_id, pool.id), limits)


def set_quota(
    store: StorePort[TenancyTx],
    principal: Principal,
    tenant_id: str,
    pool_id: str,
    cls: str,
    limit: int,
    now: datetime,
) -> Quota:
    """`quotas.set`: create or replace one row (admin or the pool's owner)."""
    limits = check_limits({cls: limit}, "quota")
    check_ref(tenant_id, "tenantId")
    check_ref(pool_id, "poolId")
    with store.begin() as tx:
        pool = pool_for_sharing(tx, principal, pool_id, "quotas.set")
        rows = grant(tx, principal, pool, tenant_id, limits, now, QuotaSet)
    return next(r for r in rows if r.cls == cls)


def list_quotas(
    store: StorePort[TenancyTx],
    principal: Principal,
    *,
    tenant_id: str | None = None,
    pool_id: str | None = None,
    device_class: str | None = None,
    scope: str | None = None,
    cluster_id: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    now: datetime | None = None,
    window: Window | None = None,
) -> Listing[QuotaUse]:
    """Quota rows of both kinds; a tenant token sees only its own rows.

    Pool rows come first, by (tenant, pool, class), then device-class rows, by (tenant, device class,
    scope, cluster), and one cursor pages through both. A filter only one kind has keeps to that kind:
    `poolId` or `scope: pool` lists pool rows only; `deviceClass`, `clusterId` or `scope: cluster|fleet`
    device-class rows only.

    With `now`, each row comes with what its tenant holds of it: for a pool row, of its class in its
    pool then (`quota.held_at`), or with `window` the most it holds at once during the window
    (`quota.in_use`, as admission counts it); for a device-class row, the devices of its class held
    at `now` in its cluster (scope cluster) or in every cluster (fleet), `window` or not: that is what
    the device-class rule counts. All is read in the same transaction."""
    who = tenant_scope(principal, tenant_id)
    pool_rows = scope in (None, "pool") and device_class is None and cluster_id is None
    class_rows = scope in (None, *SCOPES) and pool_id is None
    with store.read() as tx:
        rows: list[Quota | ClassQuota] = []
        if pool_rows:
            rows.extend(tx.quotas.find(who, pool_id))
        if class_rows:
            rows.extend(tx.class_quotas.find(who, device_class, scope, cluster_id))
        found = page(rows, _cursor_key, limit, after)
        pools = [q for q in found.items if isinstance(q, Quota)]
        classes = [q for q in found.items if isinstance(q, ClassQuota)]
        held: dict[tuple[str, str, str], int] = {}
        if now is not None and pools:
            wanted = {(q.tenant_id, q.pool_id) for q in pools}
            since = now if window is None else window.start
            live = [
                (b.tenant_id, b.pool_id, b.cls, Window(b.starts_at, b.ends_at))
                for b in tx.ledger.live_bookings(since)
                if (b.tenant_id, b.pool_id) in wanted
            ]
            held = quota.held_at(live, now) if window is None else _peaks(live, window)
        by_class: dict[tuple[str, str], dict[str, int]] = {}
        if now is not None and classes:
            known = [tx.device_classes.get(name) for name in sorted({q.device_class for q in classes})]
            tenants = sorted({q.tenant_id for q in classes})
            by_class = held_by_class(tx, tenants, [d for d in known if d is not None], now)
    uses: list[QuotaUse] = []
    for q in found.items:
        if now is None:
            uses.append(QuotaUse(q, None))
        elif isinstance(q, ClassQuota):
            uses.append(QuotaUse(q, used_by(q, by_class.get((q.tenant_id, q.device_class), {}))))
        else:
            uses.append(QuotaUse(q, held.get((q.tenant_id, q.pool_id, q.cls), 0)))
    return Listing(uses, found.next_cursor)


def _cursor_key(q: Quota | ClassQuota) -> str:
    """The order of `quotas.list` and its cursor: pool rows (`0/...`) before device-class rows
    (`1/...`), each in its key's order; a fleet row's empty cluster sorts before every cluster."""
    if isinstance(q, Quota):
        return f"0/{q.tenant_id}/{q.pool_id}/{q.cls}"
    return f"1/{q.tenant_id}/{q.device_class}/{q.scope}/{q.cluster_id or ''}"


@dataclass(frozen=True)
class QuotaUse:
    """A quota row of either kind and how much of it is held now (None when not asked)."""

    quota: Quota | ClassQuota
    used: int | None


def _peaks(
    live: list[tuple[str | None, str | None, str, Window]], window: Window
) -> dict[tuple[str, str, str], int]:
    """The peak holding during `window` per (tenant, pool, class), by the admission's own rule."""
    by_owner: dict[tuple[str, str], list[tuple[str, Window]]] = {}
    for tenant_id, pool_id, cls, booked in live:
        if tenant_id is not None and pool_id is not None:
            by_owner.setdefault((tenant_id, pool_id), []).append((cls, booked))
    return {
        (tenant_id, pool_id, str(cls)): n
        for (tenant_id, pool_id), bookings in by_owner.items()
        for cls, n in quota.in_use(bookings, window).items()
    }
