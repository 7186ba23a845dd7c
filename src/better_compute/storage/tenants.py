"""The tenants repository: tenant records by id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select, update

from better_compute.domain.records import Tenant
from better_compute.storage import rows
from better_compute.storage.tables import tenants


def _tenant(r: Mapping[str, Any]) -> Tenant:
    return Tenant(id=r["id"], name=r["name"], created_at=r["created_at"])


class SqlTenants:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, tenant_id: str) -> Tenant | None:
        found = rows.rows(self.conn, select(tenants).where(tenants.c.id == tenant_id))
        return _tenant(found[0]) if found else None

    def page(self, limit: int | None, after: str | None) -> list[Tenant]:
        return [_tenant(r) for r in rows.page(self.conn, tenants, limit=limit, after=after)]

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
