"""The tenants repository: tenant records by id.

A deleted tenant's row stays (`deleted_at`): reservations, bills and events name it, and its id is
never given to another tenant. Every read here but `any_state` sees only tenants not deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update

from better_compute.domain.tenancy.records import Tenant
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import tenants

_LIVE = tenants.c.deleted_at.is_(None)


def _tenant(r: Mapping[str, Any]) -> Tenant:
    return Tenant(id=r["id"], name=r["name"], created_at=r["created_at"], deleted_at=r["deleted_at"])


class SqlTenants:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, tenant_id: str) -> Tenant | None:
        found = rows.rows(self.conn, select(tenants).where(tenants.c.id == tenant_id, _LIVE))
        return _tenant(found[0]) if found else None

    def any_state(self, tenant_id: str) -> Tenant | None:
        """The tenant, deleted or not (to say why an id cannot be taken again)."""
        found = rows.rows(self.conn, select(tenants).where(tenants.c.id == tenant_id))
        return _tenant(found[0]) if found else None

    def hold(self, tenant_id: str) -> Tenant | None:
        """The tenant, not deleted, kept so until this transaction ends (PostgreSQL: FOR KEY SHARE).

        Writes that give a tenant something (a credential, a pool) read it this way: a concurrent
        `tenants.delete` then either commits first, and the tenant is not found here, or waits for
        this transaction and sees what it wrote. SQLite's writers are serialised already."""
        stmt = (
            select(tenants).where(tenants.c.id == tenant_id, _LIVE).with_for_update(key_share=True, read=True)
        )
        found = rows.rows(self.conn, stmt)
        return _tenant(found[0]) if found else None

    def lock(self, tenant_id: str) -> Tenant | None:
        """The tenant, not deleted, locked against every `hold` until this transaction ends
        (PostgreSQL: FOR UPDATE), for `tenants.delete`."""
        stmt = select(tenants).where(tenants.c.id == tenant_id, _LIVE).with_for_update()
        found = rows.rows(self.conn, stmt)
        return _tenant(found[0]) if found else None

    def mark_deleted(self, tenant_id: str, at: datetime) -> None:
        self.conn.execute(update(tenants).where(tenants.c.id == tenant_id, _LIVE).values(deleted_at=at))

    def rename(self, tenant_id: str, name: str) -> Tenant | None:
        # FOR NO KEY UPDATE: it waits for a delete under way (FOR UPDATE) and then finds the tenant
        # gone, and does not wait for writes that only `hold` the tenant (FOR KEY SHARE).
        stmt = select(tenants).where(tenants.c.id == tenant_id, _LIVE).with_for_update(key_share=True)
        found = rows.rows(self.conn, stmt)
        if not found:
            return None
        self.conn.execute(update(tenants).where(tenants.c.id == tenant_id, _LIVE).values(name=name))
        return _tenant(found[0])

    def page(self, limit: int | None, after: str | None) -> list[Tenant]:
        return [_tenant(r) for r in rows.page(self.conn, tenants, where=[_LIVE], limit=limit, after=after)]

    def add(self, tenant: Tenant) -> bool:
        row = {"id": tenant.id, "name": tenant.name, "created_at": tenant.created_at}
        return rows.insert_new(self.conn, tenants, [row]) == 1

    def put(self, items: Sequence[Tenant]) -> None:
        ids = [t.id for t in items]
        known = {r[0] for r in self.conn.execute(select(tenants.c.id).where(tenants.c.id.in_(ids)))}
        new = [{"id": t.id, "name": t.name, "created_at": t.created_at} for t in items if t.id not in known]
        rows.insert_missing(self.conn, tenants, new)
        for t in items:
            if t.id in known:
                self.conn.execute(update(tenants).where(tenants.c.id == t.id).values(name=t.name))
