"""The pools repository: pool records, their settings under compare-and-swap, and their nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete, select

from better_compute.domain.fleet.pools import PoolSettings, check_mode, stored_settings
from better_compute.domain.fleet.records import Pool
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import policies, pool_nodes, pools, quotas


def _pool(r: Mapping[str, Any]) -> Pool:
    mode = check_mode(r["mode"])
    return Pool(
        id=r["id"],
        name=r["name"],
        cluster_id=r["cluster_id"],
        owner_tenant_id=r["owner_tenant_id"],
        mode=mode,
        settings=stored_settings(mode, r["policy"] or {}),
        meter=r["meter"],
        generation=int(r["generation"]),
        created_at=r["created_at"],
    )


class SqlPools:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, pool_id: str) -> Pool | None:
        found = rows.rows(self.conn, select(pools).where(pools.c.id == pool_id))
        return _pool(found[0]) if found else None

    def all(self) -> list[Pool]:
        return [_pool(r) for r in rows.page(self.conn, pools)]

    def seats(self) -> list[tuple[str, str, str, str]]:
        stmt = select(pools.c.id, pools.c.cluster_id, pools.c.owner_tenant_id, pools.c.meter).order_by(
            pools.c.id
        )
        return [(r[0], r[1], r[2], r[3]) for r in self.conn.execute(stmt).all()]

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, Pool]:
        stmt = select(pool_nodes.c.node_id, pools).join(pools, pools.c.id == pool_nodes.c.pool_id)
        stmt = stmt.where(pool_nodes.c.node_id.in_(list(node_ids)))
        return {r["node_id"]: _pool(r) for r in rows.rows(self.conn, stmt)}

    def members(self, pool_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        stmt = select(pool_nodes.c.pool_id, pool_nodes.c.node_id).order_by(pool_nodes.c.node_id)
        if pool_ids is not None:
            stmt = stmt.where(pool_nodes.c.pool_id.in_(list(pool_ids)))
        out: dict[str, list[str]] = {p: [] for p in pool_ids or ()}
        for pool_id, node_id in self.conn.execute(stmt):
            out.setdefault(pool_id, []).append(node_id)
        return out

    def add(self, pool: Pool) -> bool:
        row = {
            "id": pool.id,
            "name": pool.name,
            "cluster_id": pool.cluster_id,
            "owner_tenant_id": pool.owner_tenant_id,
            "mode": pool.mode,
            "policy": pool.settings.as_mapping(),
            "meter": pool.meter,
            "generation": pool.generation,
            "created_at": pool.created_at,
        }
        return rows.insert_new(self.conn, pools, [row]) == 1

    def compare_and_set(self, pool_id: str, generation: int, settings: PoolSettings) -> bool:
        return rows.compare_and_set(
            self.conn,
            pools,
            pool_id,
            {"generation": generation},
            {"policy": settings.as_mapping(), "generation": generation + 1},
        )

    def remove(self, pool_id: str, generation: int) -> bool:
        # The generation first: the compare-and-swap takes the pool row's lock (PostgreSQL), so a
        # concurrent pools.update (which bumps it before it adds nodes) either finished before and
        # fails this, or waits and then finds the pool gone.
        if not rows.compare_and_set(
            self.conn, pools, pool_id, {"generation": generation}, {"generation": generation + 1}
        ):
            return False
        self.conn.execute(delete(quotas).where(quotas.c.pool_id == pool_id))
        self.conn.execute(delete(policies).where(policies.c.pool_id == pool_id))
        self.conn.execute(delete(pools).where(pools.c.id == pool_id))
        return True

    def set_members(self, pool_id: str, node_ids: Sequence[str]) -> bool:
        self.conn.execute(delete(pool_nodes).where(pool_nodes.c.pool_id == pool_id))
        added = rows.insert_new(self.conn, pool_nodes, [{"pool_id": pool_id, "node_id": n} for n in node_ids])
        return added == len(node_ids)
