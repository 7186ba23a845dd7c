"""The policies repository: IAM policies by tenant and pool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, delete, select

from better_compute.domain.iam import Policy
from better_compute.storage import rows
from better_compute.storage.tables import policies


def policy_of(r: Mapping[str, Any]) -> Policy:
    limits = r["limits"] or {}
    return Policy(
        name=r["name"],
        tenant_id=r["tenant_id"],
        pool_id=r["pool_id"],
        gpu_count=limits.get("gpuCount"),
        gpu_slices=limits.get("gpuSlices"),
        id=r.get("id", ""),
        created_at=r.get("created_at"),
    )


class SqlPolicies:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def find(self, tenant_id: str | None, pool_id: str | None) -> list[Policy]:
        where = [
            *([] if tenant_id is None else [policies.c.tenant_id == tenant_id]),
            *([] if pool_id is None else [policies.c.pool_id == pool_id]),
        ]
        return [policy_of(r) for r in rows.page(self.conn, policies, where=where)]

    def add(self, policy: Policy) -> bool:
        row = {
            "id": policy.id,
            "name": policy.name,
            "tenant_id": policy.tenant_id,
            "pool_id": policy.pool_id,
            "limits": policy.limits(),
            "created_at": policy.created_at,
        }
        return rows.insert_new(self.conn, policies, [row]) == 1

    def remove(self, policy_id: str) -> Policy | None:
        found = self.conn.execute(select(policies).where(policies.c.id == policy_id)).first()
        if found is None:
            return None
        self.conn.execute(delete(policies).where(policies.c.id == policy_id))
        return policy_of(dict(found._mapping))
