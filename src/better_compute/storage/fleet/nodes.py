"""The nodes repository: node records, and the row locks that order writers deriving their atoms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, null, select, update

from better_compute.domain.fleet.node_reports import REPORT_IDS_KEPT
from better_compute.domain.fleet.records import LayoutRefusal, Node
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import node_report_ids, nodes


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
        last_spec_read_at=r["last_spec_read_at"],
        report_sequence=int(r["report_sequence"]),
        spec_digest=r["spec_digest"],
        joined_at=r["joined_at"],
        carries_pool_layout=bool(r["carries_pool_layout"]),
        reboot_required=bool(r["reboot_required"]),
        layout_refused=tuple(_refusal(x) for x in r["layout_refused"] or ()),
        mig_layout=r["mig_layout"],
        host_cpu_cores=r["host_cpu_cores"],
        host_memory_mib=r["host_memory_mib"],
        owned_elsewhere=tuple((str(u), str(n)) for u, n in r["owned_elsewhere"] or ()),
        owned_elsewhere_at=r["owned_elsewhere_at"],
    )


def _refusal(raw: Mapping[str, Any]) -> LayoutRefusal:
    return LayoutRefusal(
        gpu=str(raw["gpu"]),
        action=str(raw["action"]),
        reason=str(raw["reason"]),
        since=datetime.fromisoformat(str(raw["since"])),
    )


def last_contact(r: Mapping[str, Any]) -> datetime | None:
    """A node's last contact from its row: the later of its last report and its last spec read
    (None: neither yet)."""
    seen = [t for t in (r["last_report_at"], r["last_spec_read_at"]) if t is not None]
    return max(seen) if seen else None


class SqlNodes:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def by_ids(self, node_ids: Sequence[str]) -> dict[str, Node]:
        found = rows.rows(self.conn, select(nodes).where(nodes.c.id.in_(list(node_ids))))
        return {r["id"]: _node(r) for r in found}

    def contacts(self, node_ids: Sequence[str]) -> dict[str, datetime | None]:
        q = select(nodes.c.id, nodes.c.last_report_at, nodes.c.last_spec_read_at).where(
            nodes.c.id.in_(sorted(set(node_ids)))
        )
        return {r["id"]: last_contact(r) for r in rows.rows(self.conn, q)}

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

    def accept_sequences(self, taken: Sequence[tuple[str, int, datetime]]) -> bool:
        """Record each `(node, sequence, at)` as its node's last accepted report where the sequence is
        greater than the one stored; whether every one was (False: one at least was not, a replay or a
        report that lost a race, and the caller must not commit). One cached statement for every
        node, under the nodes' row locks (`lock`); its row count tells."""
        if not taken:
            return True
        stmt = (
            update(nodes)
            .where(nodes.c.id == bindparam("b_id"), nodes.c.report_sequence < bindparam("b_sequence"))
            .values(report_sequence=bindparam("b_sequence"), last_report_at=bindparam("b_at"))
        )
        result = self.conn.execute(stmt, [{"b_id": n, "b_sequence": q, "b_at": at} for n, q, at in taken])
        return result.rowcount == len(taken)

    def accept_read(self, node_id: str, public_key: str, sequence: int, at: datetime) -> bool:
        """Record a signed spec read's `sequence` as the node's last accepted, and `at` as its last
        spec read, where the sequence is greater than the one stored and the node's key is still
        `public_key`; whether it was (False: a replay, a number already used, or a new key). One
        statement, no lock taken beforehand: its row count tells."""
        result = self.conn.execute(
            update(nodes)
            .where(
                nodes.c.id == node_id,
                nodes.c.public_key == public_key,
                nodes.c.report_sequence < sequence,
            )
            .values(report_sequence=sequence, last_spec_read_at=at)
        )
        return result.rowcount == 1

    def report_ids_taken(self, wanted: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which `(node, reportId)` pairs were accepted before (and are still kept)."""
        if not wanted:
            return set()
        found = self.conn.execute(
            select(node_report_ids.c.node_id, node_report_ids.c.report_id).where(
                node_report_ids.c.node_id.in_(sorted({n for n, _ in wanted})),
                node_report_ids.c.report_id.in_(sorted({r for _, r in wanted})),
            )
        )
        return {(node_id, report_id) for node_id, report_id in found} & set(wanted)

    def take_report_ids(self, taken: Sequence[tuple[str, str, datetime]]) -> None:
        """Record each `(node, reportId, at)` as accepted, and forget the nodes' ids older than
        `REPORT_IDS_KEPT`. Called under the nodes' row locks, after `report_ids_taken` said the ids
        are new."""
        if not taken:
            return
        self.conn.execute(
            delete(node_report_ids).where(
                node_report_ids.c.node_id.in_(sorted({n for n, _, _ in taken})),
                node_report_ids.c.accepted_at < min(at for _, _, at in taken) - REPORT_IDS_KEPT,
            )
        )
        self.conn.execute(
            insert(node_report_ids),
            [{"node_id": n, "report_id": r, "accepted_at": at} for n, r, at in taken],
        )

    def set_owned_elsewhere(
        self, node_id: str, holders: Sequence[tuple[str, str]], at: datetime | None
    ) -> None:
        self.conn.execute(
            update(nodes)
            .where(nodes.c.id == node_id)
            .values(owned_elsewhere=[list(h) for h in holders] if holders else null(), owned_elsewhere_at=at)
        )

    def set_layout_refused(self, node_id: str, refused: Sequence[LayoutRefusal]) -> None:
        value = [
            {"gpu": r.gpu, "action": r.action, "reason": r.reason, "since": r.since.isoformat()}
            for r in refused
        ]
        self.conn.execute(update(nodes).where(nodes.c.id == node_id).values(layout_refused=value or null()))

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
