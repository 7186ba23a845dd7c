"""The GPUs repository: each GPU as its node last reported it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.inventory import MigInstance
from better_compute.domain.records import Gpu
from better_compute.storage import rows
from better_compute.storage.tables import gpus


def _instance(i: Mapping[str, Any]) -> MigInstance:
    return MigInstance(
        profile=i["profile"],
        gi_id=i["giId"],
        ci_id=i["ciId"],
        placement_start=i["placementStart"],
        placement_size=i["placementSize"],
        uuid=i["uuid"],
    )


def _gpu(r: Mapping[str, Any]) -> Gpu:
    return Gpu(
        id=r["id"],
        node_id=r["node_id"],
        index=int(r["gpu_index"]),
        product=r["product"],
        model=r["model"],
        memory_mib=int(r["memory_mib"]),
        numa_node=r["numa_node"],
        nvlink_peers=tuple(r["nvlink_peers"] or ()),
        healthy=bool(r["healthy"]),
        present=bool(r["present"]),
        mig_mode_current=bool(r["mig_mode_current"]),
        mig_mode_pending=bool(r["mig_mode_pending"]),
        mig_instances=tuple(_instance(i) for i in r["mig_instances"] or ()),
        updated_at=r["updated_at"],
    )


def _row(g: Gpu) -> dict[str, Any]:
    return {
        "id": g.id,
        "node_id": g.node_id,
        "gpu_index": g.index,
        "product": g.product,
        "model": g.model,
        "memory_mib": g.memory_mib,
        "numa_node": g.numa_node,
        "nvlink_peers": list(g.nvlink_peers),
        "healthy": g.healthy,
        "present": g.present,
        "mig_mode_current": g.mig_mode_current,
        "mig_mode_pending": g.mig_mode_pending,
        "mig_instances": [
            {
                "profile": i.profile,
                "giId": i.gi_id,
                "ciId": i.ci_id,
                "placementStart": i.placement_start,
                "placementSize": i.placement_size,
                "uuid": i.uuid,
            }
            for i in g.mig_instances
        ],
        "updated_at": g.updated_at,
    }


class SqlGpus:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, gpu_id: str) -> Gpu | None:
        found = rows.rows(self.conn, select(gpus).where(gpus.c.id == gpu_id))
        return _gpu(found[0]) if found else None

    def of_nodes(self, node_ids: Sequence[str]) -> list[Gpu]:
        return [_gpu(r) for r in rows.rows(self.conn, select(gpus).where(gpus.c.node_id.in_(list(node_ids))))]

    def page(self, node_id: str | None, limit: int | None, after: str | None) -> list[Gpu]:
        where = [] if node_id is None else [gpus.c.node_id == node_id]
        return [_gpu(r) for r in rows.page(self.conn, gpus, where=where, limit=limit, after=after)]

    def put(self, items: Sequence[Gpu]) -> None:
        rows.upsert(self.conn, gpus, [_row(g) for g in items], ["id"])
