"""The nodes repository: node records, and the row locks that order writers deriving their atoms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from better_compute.domain.node_reports import REPORT_IDS_KEPT
from better_compute.domain.records import Node
from better_compute.storage import rows
from better_compute.storage.tables import node_report_ids, nodes


def _node(r: Mapping[str, Any]) -> Node:
    return Node(
        id=r["id"],
        cluster_id=r["cluster_id"],
        created_at=r["created_at"],
        cordoned=bool(r["cordoned"]),
        public_key=r["public_key"],
        spec_generation=int(r["spec_generation"]),
        observed_generation=int(r["observed_generation"]),
        last_report_at=r["last_report_at"],
        report_sequence=int(r["report_sequence"]),
        spec_digest=r["spec_digest"],
        joined_at=r["joined_at"],
        carries_pool_layout=bool(r["carries_pool_layout"]),
        reboot_required=bool(r["reboot_required"]),
        mig_layout=r["mig_layout"],
        host_cpu_cores=r["host_cpu_cores"],
        host_memory_mib=r["host_memory_mib"],
    )


class SqlNodes:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def by_ids(self, node_ids: Sequence[str]) -> dict[str, Node]:
        found = rows.rows(self.conn, select(nodes).where(nodes.c.id.in_(list(node_ids))))
        return {r["id"]: _node(r) for r in found}

    def page(self, cluster_id: str | None, limit: int | None, after: str | None) -> list[Node]:
        where = [] if cluster_id is None else [nodes.c.cluster_id == cluster_id]
        return [_node(r) for r in rows.page(self.conn, nodes, where=where, limit=limit, after=after)]

    def add_missing(self, items: Sequence[Node]) -> None:
        rows.insert_missing(
            self.conn,
            nodes,
            [
                {
                    "id": n.id,
                    "cluster_id": n.cluster_id,
                    "created_at": n.created_at,
                    "carries_pool_layout": n.carries_pool_layout,
                    "host_cpu_cores": n.host_cpu_cores,
                    "host_memory_mib": n.host_memory_mib,
                }
                for n in items
            ],
        )

    def lock(self, node_ids: Sequence[str]) -> None:
        """Lock the nodes' rows until the transaction ends (PostgreSQL; SQLite serialises writers), in
        id order so that lockers never wait on each other in a cycle. FOR NO KEY UPDATE: other writers
        that merely refer to a node (a foreign key's check) are not held up."""
        if self.conn.dialect.name == "postgresql" and node_ids:
            self.conn.execute(
                select(nodes.c.id)
                .where(nodes.c.id.in_(sorted(node_ids)))
                .order_by(nodes.c.id)
                .with_for_update(key_share=True)
            )

    def set_mig_layout(self, node_ids: Sequence[str], layout: str | None) -> None:
        """The layout the nodes are told instead of their pool's (None: their pool's again)."""
        self.conn.execute(update(nodes).where(nodes.c.id.in_(list(node_ids))).values(mig_layout=layout))

    def mark_observed(self, node_id: str, generation: int, at: datetime) -> None:
        self.conn.execute(
            update(nodes)
            .where(nodes.c.id == node_id)
            .values(observed_generation=generation, last_report_at=at)
        )

    def register_key(self, node_id: str, public_key: str, at: datetime) -> None:
        """Make `public_key` the node's, and start its report sequence again: reports signed with
        an earlier key no longer verify, so their numbers mean nothing."""
        self.conn.execute(
            update(nodes)
            .where(nodes.c.id == node_id)
            .values(public_key=public_key, joined_at=at, report_sequence=0)
        )

    def accept_sequence(self, node_id: str, sequence: int, at: datetime) -> bool:
        """Record `sequence` as the node's last accepted report if it is greater than the one stored;
        False (nothing written) when it is not. One statement: of two reports with the same number,
        the second waits for the first's row lock, then finds the number taken."""
        result = self.conn.execute(
            update(nodes)
            .where(nodes.c.id == node_id, nodes.c.report_sequence < sequence)
            .values(report_sequence=sequence, last_report_at=at)
        )
        return result.rowcount == 1

    def take_report_id(self, node_id: str, report_id: str, at: datetime) -> bool:
        """Record `report_id` as accepted from the node; False when it already was. Called under the
        node's row lock (`lock`), so a look-up then an insert cannot race another report of the node."""
        seen = self.conn.execute(
            select(node_report_ids.c.report_id).where(
                node_report_ids.c.node_id == node_id, node_report_ids.c.report_id == report_id
            )
        ).first()
        if seen is not None:
            return False
        self.conn.execute(
            delete(node_report_ids).where(
                node_report_ids.c.node_id == node_id, node_report_ids.c.accepted_at < at - REPORT_IDS_KEPT
            )
        )
        self.conn.execute(
            insert(node_report_ids).values(node_id=node_id, report_id=report_id, accepted_at=at)
        )
        return True

    def set_reboot_required(self, node_id: str, required: bool) -> None:
        self.conn.execute(update(nodes).where(nodes.c.id == node_id).values(reboot_required=required))

    def set_cordoned(self, node_id: str, cordoned: bool) -> None:
        self.conn.execute(update(nodes).where(nodes.c.id == node_id).values(cordoned=cordoned))

    def cordoned_ids(self) -> frozenset[str]:
        found = self.conn.execute(select(nodes.c.id).where(nodes.c.cordoned.is_(True)))
        return frozenset(r[0] for r in found)

    def advance_spec(self, node_id: str, generation: int, digest: str) -> bool:
        """Store `digest` with the generation after `generation`, if the node is still at
        `generation`; False when another reader advanced it first."""
        result = self.conn.execute(
            update(nodes)
            .where(nodes.c.id == node_id, nodes.c.spec_generation == generation)
            .values(spec_generation=generation + 1, spec_digest=digest)
        )
        return result.rowcount == 1
