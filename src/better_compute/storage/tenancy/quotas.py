"""The quotas repository: (tenant, pool, atom class) -> limit rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete

from better_compute.domain.tenancy.records import Quota
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import quotas


def _quota(r: Mapping[str, Any]) -> Quota:
    return Quota(
        tenant_id=r["tenant_id"],
        pool_id=r["pool_id"],
        cls=r["class"],
        limit=int(r["limit"]),
        updated_at=r["updated_at"],
    )


class SqlQuotas:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def find(self, tenant_id: str | None, pool_id: str | None) -> list[Quota]:
        where = [
            *([] if tenant_id is None else [quotas.c.tenant_id == tenant_id]),
            *([] if pool_id is None else [quotas.c.pool_id == pool_id]),
        ]
        order = (quotas.c.tenant_id, quotas.c.pool_id, quotas.c["class"])
        stmt = quotas.select().where(*where).order_by(*order)
        return [_quota(r) for r in rows.rows(self.conn, stmt)]

    def put(self, items: Sequence[Quota]) -> None:
        rows.upsert(
            self.conn,
            quotas,
            [
                {
                    "tenant_id": q.tenant_id,
                    "pool_id": q.pool_id,
                    "class": q.cls,
                    "limit": q.limit,
                    "updated_at": q.updated_at,
                }
                for q in items
            ],
            ["tenant_id", "pool_id", "class"],
        )

    def remove_tenant(self, tenant_id: str) -> int:
        return self.conn.execute(delete(quotas).where(quotas.c.tenant_id == tenant_id)).rowcount
