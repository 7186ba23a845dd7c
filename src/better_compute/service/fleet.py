"""Registering a fleet described by a fleet file: tenants, clusters, nodes and pools, idempotently."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.fleet import FleetSpec
from better_compute.service import quotas
from better_compute.service.ports import StorePort


def register_fleet(store: StorePort, spec: FleetSpec, now: datetime) -> None:
    """Create or update everything the file names; existing rows keep their creation time."""
    with store.begin() as tx:
        inv = tx.inventory
        inv.upsert("tenants", [{"id": t.id, "name": t.name, "created_at": now} for t in spec.tenants], ["id"])
        existing_clusters = {c["id"] for c in inv.list("clusters")}
        inv.upsert(
            "clusters",
            [
                {"id": c.name, "region": c.region, "residency": list(c.residency), "created_at": now}
                for c in spec.clusters
                if c.name not in existing_clusters
            ],
            ["id"],
        )
        known_nodes = inv.nodes_by_id([n.name for n in spec.nodes])
        inv.upsert(
            "nodes",
            [
                {"id": n.name, "cluster_id": n.cluster, "created_at": now}
                for n in spec.nodes
                if n.name not in known_nodes
            ],
            ["id"],
        )
        for pool in spec.pools:
            current = inv.get("pools", pool.name)
            row = {
                "id": pool.name,
                "name": pool.name,
                "cluster_id": pool.cluster,
                "owner_tenant_id": pool.owner,
                "mode": pool.mode,
                "policy": dict(pool.policy),
                "meter": pool.meter,
                "created_at": current["created_at"] if current else now,
            }
            if current is None or any(current[k] != v for k, v in row.items()):
                inv.upsert("pools", [row], ["id"])
            inv.set_pool_nodes(pool.name, list(pool.nodes))
            if pool.owner_quota:
                quotas.write_rows(tx, pool.owner, pool.name, pool.owner_quota, now)
        tx.events.append(
            "fleet.registered",
            "fleet",
            {"clusters": len(spec.clusters), "nodes": len(spec.nodes), "pools": len(spec.pools)},
            now,
        )
