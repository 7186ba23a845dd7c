"""The bindings repository: each node's part of an allocation's binding, as it last reported it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, select

from better_compute.domain.fleet.bindings import BindingState
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import bindings


class SqlBindings:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(
        self, allocation_id: str, node_id: str, state: BindingState, detail: str | None, at: datetime
    ) -> None:
        rows.upsert(
            self.conn,
            bindings,
            [
                {
                    "allocation_id": allocation_id,
                    "node_id": node_id,
                    "state": state,
                    "detail": detail,
                    "updated_at": at,
                }
            ],
            key=["allocation_id", "node_id"],
        )

    def of_allocations(
        self, allocation_ids: Sequence[str], *, for_update: bool = False
    ) -> dict[str, dict[str, BindingState]]:
        """Each allocation's state per node. `for_update` locks the rows read until the
        transaction ends, so a node's report about them (an upsert of the same rows) waits for it,
        and one that came first is read as it committed."""
        out: dict[str, dict[str, BindingState]] = {a: {} for a in allocation_ids}
        if not allocation_ids:
            return out
        stmt = select(bindings.c.allocation_id, bindings.c.node_id, bindings.c.state).where(
            bindings.c.allocation_id.in_(list(allocation_ids))
        )
        if for_update:
            stmt = stmt.with_for_update()
        for r in rows.rows(self.conn, stmt):
            out[r["allocation_id"]][r["node_id"]] = r["state"]
        return out
