"""The clusters repository."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select, update

from better_compute.domain.fleet.cluster_kinds import settings_from_stored, settings_to_stored
from better_compute.domain.fleet.records import Cluster
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import clusters


def _cluster(r: Mapping[str, Any]) -> Cluster:
    return Cluster(
        id=r["id"],
        region=r["region"],
        residency=tuple(r["residency"] or ()),
        phase=r["phase"],
        created_at=r["created_at"],
        kind=r["kind"],
        slurm=settings_from_stored(r["slurm"]) if r["slurm"] else None,
    )


def _row(c: Cluster) -> dict[str, Any]:
    return {
        "id": c.id,
        "region": c.region,
        "residency": list(c.residency),
        "phase": c.phase,
        "created_at": c.created_at,
        "kind": c.kind,
        "slurm": settings_to_stored(c.slurm) if c.slurm else None,
    }


class SqlClusters:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, cluster_id: str) -> Cluster | None:
        found = rows.rows(self.conn, select(clusters).where(clusters.c.id == cluster_id))
        return _cluster(found[0]) if found else None

    def page(self, limit: int | None, after: str | None) -> list[Cluster]:
        return [_cluster(r) for r in rows.page(self.conn, clusters, limit=limit, after=after)]

    def all(self) -> list[Cluster]:
        return [_cluster(r) for r in rows.rows(self.conn, select(clusters).order_by(clusters.c.id))]

    def add_missing(self, items: Sequence[Cluster]) -> None:
        rows.insert_missing(self.conn, clusters, [_row(c) for c in items])

    def set_phase(self, cluster_id: str, phase: str, previous: str) -> bool:
        result = self.conn.execute(
            update(clusters)
            .where(clusters.c.id == cluster_id, clusters.c.phase == previous)
            .values(phase=phase)
        )
        return result.rowcount == 1

    def add(self, cluster: Cluster) -> bool:
        """Insert a new cluster; False when its id is taken (a concurrent create waits, then is
        skipped), and nothing is written then."""
        return rows.insert_new(self.conn, clusters, [_row(cluster)]) == 1
