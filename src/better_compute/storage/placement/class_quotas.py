"""The device-class quotas repository: (tenant, device class, scope, cluster) -> ceiling rows.

A fleet row has no cluster; it is stored with cluster_id '' so that the primary key keeps one fleet
row per (tenant, device class) on both stores, and read back as None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Connection, delete

from better_compute.domain.placement.class_quotas import ClassQuota, Scope
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import class_quotas

_FLEET = ""


def _class_quota(r: Mapping[str, Any]) -> ClassQuota:
    return ClassQuota(
        tenant_id=r["tenant_id"],
        device_class=r["device_class"],
        scope=cast(Scope, r["scope"]),
        cluster_id=r["cluster_id"] or None,
        guaranteed_devices=int(r["guaranteed_devices"]),
        floor_devices=int(r["floor_devices"]),
        over_quota_weight=float(r["over_quota_weight"]),
        updated_at=r["updated_at"],
    )


class SqlClassQuotas:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def find(
        self,
        tenant_id: str | None = None,
        device_class: str | None = None,
        scope: str | None = None,
        cluster_id: str | None = None,
    ) -> list[ClassQuota]:
        c = class_quotas.c
        where = [
            *([] if tenant_id is None else [c.tenant_id == tenant_id]),
            *([] if device_class is None else [c.device_class == device_class]),
            *([] if scope is None else [c.scope == scope]),
            *([] if cluster_id is None else [c.cluster_id == cluster_id]),
        ]
        stmt = (
            class_quotas.select().where(*where).order_by(c.tenant_id, c.device_class, c.scope, c.cluster_id)
        )
        return [_class_quota(r) for r in rows.rows(self.conn, stmt)]

    def put(self, row: ClassQuota) -> None:
        rows.upsert(
            self.conn,
            class_quotas,
            [
                {
                    "tenant_id": row.tenant_id,
                    "device_class": row.device_class,
                    "scope": row.scope,
                    "cluster_id": row.cluster_id or _FLEET,
                    "guaranteed_devices": row.guaranteed_devices,
                    "floor_devices": row.floor_devices,
                    "over_quota_weight": row.over_quota_weight,
                    "updated_at": row.updated_at,
                }
            ],
            ["tenant_id", "device_class", "scope", "cluster_id"],
        )

    def remove_tenant(self, tenant_id: str) -> int:
        stmt = delete(class_quotas).where(class_quotas.c.tenant_id == tenant_id)
        return self.conn.execute(stmt).rowcount
