"""Pages of rows for list use cases: items in a stable order and the cursor of the next page.

Tenancy lists are small (tenants, pools, quota rows, policies) and are often filtered by visibility
after reading, so they are paged here, in memory, by a sort key that is unique per row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from better_compute.domain.credentials import Principal
from better_compute.domain.tenancy import tenant_scope
from better_compute.service.ports import Row, StorePort

DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Listing:
    """One page: `next_cursor` is None on the last page."""

    items: list[Row] = field(default_factory=list)
    next_cursor: str | None = None


def page(rows: Sequence[Row], key: Callable[[Row], str], limit: int | None, after: str | None) -> Listing:
    """The rows after cursor `after` in `key` order, at most `limit` (default 100) of them."""
    size = limit or DEFAULT_LIMIT
    ordered = sorted(rows, key=key)
    if after is not None:
        ordered = [r for r in ordered if key(r) > after]
    items = ordered[:size]
    more = len(ordered) > size
    return Listing(items=items, next_cursor=key(items[-1]) if more and items else None)


def tenant_pool_page(
    store: StorePort,
    principal: Principal,
    table: str,
    key: Callable[[Row], str],
    *,
    tenant_id: str | None,
    pool_id: str | None,
    limit: int | None,
    after: str | None,
) -> Listing:
    """A page of a table keyed by tenant and pool (quota rows, policies), filtered by either; a
    tenant's token sees only its own rows."""
    scope = tenant_scope(principal, tenant_id)
    filters = {k: v for k, v in (("tenant_id", scope), ("pool_id", pool_id)) if v is not None}
    with store.read() as tx:
        rows = tx.inventory.list(table, filters=filters)
    return page(rows, key, limit, after)
