"""The MIG layout gate's repository: one row per node whose layout change is under way (SPEC 6.1,
table `capacity_mig_layouts`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.records import MigLayoutGate
from better_compute.storage import rows
from better_compute.storage.tables import capacity_mig_layouts


def _gate(r: Mapping[str, Any]) -> MigLayoutGate:
    return MigLayoutGate(
        node_id=r["node_id"],
        pool_id=r["pool_id"],
        frozen_layout=r["frozen_layout"],
        pending_layout=r["pending_layout"],
        state=r["state"],
        requested_at=r["requested_at"],
        scheduled_from=r["scheduled_from"],
        granted_at=r["granted_at"],
        granted_generation=r["granted_generation"],
        version=int(r["version"]),
        lease_owner=r["lease_owner"],
        lease_until=r["lease_until"],
    )


class SqlMigLayouts:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def all_rows(self) -> list[MigLayoutGate]:
        stmt = select(capacity_mig_layouts).order_by(capacity_mig_layouts.c.node_id)
        return [_gate(r) for r in rows.rows(self.conn, stmt)]
