"""The endpoints repository: endpoints (docs/endpoints.md) and the nodes their variants took."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select, update

from better_compute.domain.endpoints.records import EndpointInstance, EndpointRecord
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import endpoint_instances, endpoints


def _endpoint(r: Mapping[str, Any]) -> EndpointRecord:
    return EndpointRecord(
        name=r["name"],
        tenant_id=r["tenant_id"],
        spec=r["spec"],
        status=r["status"],
        reason=r["reason"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        generation=int(r["generation"]),
    )


def _instance(r: Mapping[str, Any]) -> EndpointInstance:
    return EndpointInstance(r["node_id"], r["endpoint"], r["variant"], r["layout"], r["created_at"])


class SqlEndpoints:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, name: str, *, lock: bool = False) -> EndpointRecord | None:
        """The endpoint; `lock`: its row stays locked until the transaction ends (PostgreSQL; SQLite
        serialises writers), so that writers to one endpoint take turns."""
        stmt = select(endpoints).where(endpoints.c.name == name)
        if lock and self.conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        found = rows.rows(self.conn, stmt)
        return _endpoint(found[0]) if found else None

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[EndpointRecord]:
        where = [] if tenant_id is None else [endpoints.c.tenant_id == tenant_id]
        return [_endpoint(r) for r in rows.page(self.conn, endpoints, where=where, limit=limit, after=after)]

    def by_status(self, statuses: Sequence[str], limit: int) -> list[EndpointRecord]:
        """Up to `limit` endpoints stored in one of `statuses`, oldest first (by creation, then
        name): the `Failed` ones a retry takes again, those the doctor looks at."""
        stmt = (
            select(endpoints)
            .where(endpoints.c.status.in_(list(statuses)))
            .order_by(endpoints.c.created_at, endpoints.c.name)
            .limit(limit)
        )
        return [_endpoint(r) for r in rows.rows(self.conn, stmt)]

    def add(self, item: EndpointRecord) -> bool:
        """False when the name is taken (a concurrent create of the same name waits, then is refused)."""
        row = {
            "name": item.name,
            "tenant_id": item.tenant_id,
            "spec": dict(item.spec),
            "status": item.status,
            "reason": item.reason,
            "generation": item.generation,
            "created_at": item.created_at,
            "updated_at": item.updated_at,
        }
        return rows.insert_new(self.conn, endpoints, [row]) == 1

    def set_status(self, name: str, status: str, reason: str | None, at: datetime) -> None:
        self.conn.execute(
            update(endpoints)
            .where(endpoints.c.name == name)
            .values(status=status, reason=reason, updated_at=at, generation=endpoints.c.generation + 1)
        )

    def set_spec(self, name: str, spec: Mapping[str, Any], status: str, at: datetime) -> None:
        self.conn.execute(
            update(endpoints)
            .where(endpoints.c.name == name)
            .values(
                spec=dict(spec),
                status=status,
                reason=None,
                updated_at=at,
                generation=endpoints.c.generation + 1,
            )
        )

    def set_instance_layout(self, node_id: str, layout: str) -> None:
        self.conn.execute(
            update(endpoint_instances).where(endpoint_instances.c.node_id == node_id).values(layout=layout)
        )

    def remove(self, name: str) -> None:
        self.conn.execute(delete(endpoint_instances).where(endpoint_instances.c.endpoint == name))
        self.conn.execute(delete(endpoints).where(endpoints.c.name == name))

    def add_instances(self, items: Sequence[EndpointInstance]) -> None:
        """Claim the nodes; the primary key refuses a node another endpoint took meanwhile."""
        if items:
            self.conn.execute(
                endpoint_instances.insert(),
                [
                    {
                        "node_id": i.node_id,
                        "endpoint": i.endpoint,
                        "variant": i.variant,
                        "layout": i.layout,
                        "created_at": i.created_at,
                    }
                    for i in items
                ],
            )

    def instances(self, name: str) -> list[EndpointInstance]:
        stmt = select(endpoint_instances).where(endpoint_instances.c.endpoint == name)
        return [_instance(r) for r in rows.rows(self.conn, stmt.order_by(endpoint_instances.c.node_id))]

    def instances_of_nodes(self, node_ids: Sequence[str]) -> dict[str, EndpointInstance]:
        if not node_ids:
            return {}
        stmt = select(endpoint_instances).where(endpoint_instances.c.node_id.in_(list(node_ids)))
        return {r["node_id"]: _instance(r) for r in rows.rows(self.conn, stmt)}

    def instances_of_endpoints(self, names: Sequence[str]) -> dict[str, list[EndpointInstance]]:
        found: dict[str, list[EndpointInstance]] = {n: [] for n in names}
        if names:
            stmt = select(endpoint_instances).where(endpoint_instances.c.endpoint.in_(list(names)))
            for r in rows.rows(self.conn, stmt.order_by(endpoint_instances.c.node_id)):
                found[r["endpoint"]].append(_instance(r))
        return found


__all__ = ["SqlEndpoints"]
