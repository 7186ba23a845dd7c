"""The GPUs repository: each GPU as its node last reported it, and the node holding each uuid a present
GPU is known by (domain.fleet.gpu_owners), written with the GPU's row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete, select

from better_compute.domain.fleet.gpu_owners import Holder, device_uuids, owned_elsewhere
from better_compute.domain.fleet.inventory import MigInstance
from better_compute.domain.fleet.records import Gpu
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import device_uuids as held_uuids
from better_compute.storage.kernel.tables import gpus


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

    def by_ids(self, gpu_ids: Sequence[str]) -> dict[str, Gpu]:
        found: dict[str, Gpu] = {}
        for where in rows.matching(self.conn, gpus.c.id, sorted(set(gpu_ids))):
            for r in rows.rows(self.conn, select(gpus).where(where)):
                found[r["id"]] = _gpu(r)
        return found

    def put(self, items: Sequence[Gpu]) -> None:
        rows.upsert(self.conn, gpus, [_row(g) for g in items], ["id"])
        self._hold(items)

    def holders(self, uuids: Sequence[str]) -> dict[str, Holder]:
        return {h.uuid: h for h in self._held(held_uuids.c.uuid, uuids)}

    def _held(self, column: Any, values: Sequence[str]) -> list[Holder]:
        """The claims whose `column` (a uuid, or a GPU's) is one of `values`."""
        found: list[Holder] = []
        columns = (held_uuids.c.uuid, held_uuids.c.gpu_id, held_uuids.c.node_id)
        for where in rows.matching(self.conn, column, sorted(set(values))):
            found.extend(Holder(u, g, n) for u, g, n in self.conn.execute(select(*columns).where(where)))
        return found

    def _hold(self, items: Sequence[Gpu]) -> None:
        """What each GPU written holds from now on: a present one, its uuids for its node; one not
        present (gone, released), nothing. A uuid another node holds is not taken (see `put`).
        Only what changed is written: a GPU written again keeps the claims it had."""
        if not items:
            return
        claims: dict[str, tuple[str, str]] = {}  # uuid -> (GPU, node)
        conflicts: dict[str, list[Holder]] = {}  # by the node refused
        for g in items:
            if not g.present:
                continue
            for uuid in device_uuids(g.id, g.mig_instances):
                first = claims.setdefault(uuid, (g.id, g.node_id))
                if first[1] != g.node_id:  # two nodes' GPUs in one write: the first has it
                    conflicts.setdefault(g.node_id, []).append(Holder(uuid, *first))
        written = {(g.id, g.node_id) for g in items}
        had = self._held(held_uuids.c.gpu_id, [g.id for g in items])
        # What these GPUs' nodes held with them that they hold no more (a GPU gone, an instance
        # destroyed); another node's claim on one of the uuids stays, and refuses the new one below.
        let_go = [h.uuid for h in had if (h.gpu, h.node) in written and h.uuid not in claims]
        for where in rows.matching(self.conn, held_uuids.c.uuid, sorted(let_go)):
            self.conn.execute(delete(held_uuids).where(where))
        kept = {h.uuid: (h.gpu, h.node) for h in had}
        new = [
            {"uuid": uuid, "gpu_id": gpu, "node_id": node}
            for uuid, (gpu, node) in claims.items()
            if kept.get(uuid) != (gpu, node)
        ]
        refused = rows.upsert_held(self.conn, held_uuids, new, "uuid", "node_id")
        if refused:
            holders = self.holders(sorted(refused))
            for uuid in sorted(refused):
                gpu, node = claims[uuid]
                conflicts.setdefault(node, []).append(holders.get(uuid, Holder(uuid, gpu, "another node")))
        if conflicts:
            node = min(conflicts)
            raise owned_elsewhere(node, conflicts[node])
