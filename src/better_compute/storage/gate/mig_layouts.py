"""The MIG layout gate's repository: one `capacity_mig_layouts` row per node whose layout change is
under way. Writes are compare-and-set on `version`, so two reconcilers (or a reconciler and a new
layout request) never both move one node; leases say which reconciler should try."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, or_, select, update

from better_compute.domain.gate.records import MigLayoutGate
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import capacity_mig_layouts as gates


def _gate(r: Mapping[str, Any]) -> MigLayoutGate:
    return MigLayoutGate(**{k: r[k] for k in MigLayoutGate.__slots__})


class SqlMigLayouts:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def all_rows(self) -> list[MigLayoutGate]:
        return [_gate(r) for r in rows.rows(self.conn, select(gates).order_by(gates.c.node_id))]

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, MigLayoutGate]:
        if not node_ids:
            return {}
        found = rows.rows(self.conn, select(gates).where(gates.c.node_id.in_(list(node_ids))))
        return {r["node_id"]: _gate(r) for r in found}

    def add(self, gate: MigLayoutGate) -> None:
        self.conn.execute(insert(gates).values(**asdict(gate)))

    def replace(self, gate: MigLayoutGate) -> bool:
        """Write `gate` over the row at `gate.version - 1`; False when another writer moved it."""
        values = {k: v for k, v in asdict(gate).items() if k != "node_id"}
        result = self.conn.execute(
            update(gates)
            .where(gates.c.node_id == gate.node_id, gates.c.version == gate.version - 1)
            .values(**values)
        )
        return result.rowcount == 1

    def remove(self, node_id: str, version: int) -> bool:
        result = self.conn.execute(
            delete(gates).where(gates.c.node_id == node_id, gates.c.version == version)
        )
        return result.rowcount == 1

    def lease(
        self,
        owner: str,
        now: datetime,
        until: datetime,
        limit: int,
        recheck: datetime | None = None,
        woken: Sequence[str] = (),
    ) -> list[str]:
        """Take (or renew) the lease of up to `limit` nodes no other live lease holds and that have
        something to do now, least recently leased first; returns the nodes `owner` holds now. A
        node scheduled for later waits unleased, so a reconciler's leases go to nodes it can move,
        unless a booking on it ended early (it is in `woken`) or its last lease ran out before
        `recheck` (it is looked at again now and then, in case the news of such an end was missed).
        On PostgreSQL the candidates are locked `SKIP LOCKED`, so replicas leasing at once split the
        nodes instead of queueing on each other's rows."""
        free = or_(gates.c.lease_until.is_(None), gates.c.lease_until <= now, gates.c.lease_owner == owner)
        due = or_(gates.c.state != "scheduled", gates.c.scheduled_from <= now)
        if recheck is not None:
            due = or_(due, gates.c.lease_until.is_(None), gates.c.lease_until <= recheck)
        if woken:
            due = or_(due, gates.c.node_id.in_(list(woken)))
        # Least recently leased first, so a reconciler holding fewer leases than there are nodes
        # goes round them all instead of renewing the same ones.
        order = (gates.c.lease_until.asc().nulls_first(), gates.c.node_id)
        query = select(gates.c.node_id).where(free, due).order_by(*order).limit(limit)
        if self.conn.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        node_ids = [r[0] for r in self.conn.execute(query)]
        if node_ids:
            self.conn.execute(
                update(gates)
                .where(and_(gates.c.node_id.in_(node_ids), free, due))
                .values(lease_owner=owner, lease_until=until)
            )
        return node_ids

    def leased_to(self, node_id: str, owner: str, now: datetime) -> bool:
        row = self.conn.execute(
            select(gates.c.lease_owner, gates.c.lease_until).where(gates.c.node_id == node_id)
        ).first()
        return row is not None and row[0] == owner and row[1] is not None and row[1] > now
