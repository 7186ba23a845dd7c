"""The replica states repository: each node's last word on the container it runs for an allocation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, delete, select

from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import replica_states


def _state(r: Any) -> ReplicaState:
    return ReplicaState(
        allocation_id=r["allocation_id"],
        node_id=r["node_id"],
        state=cast("Any", r["state"]),
        updated_at=r["updated_at"],
        exit_code=r["exit_code"],
        problem=cast("Any", r["problem"]),
        detail=r["detail"],
        restarts=r["restarts"],
        address=r["address"],
    )


class SqlReplicaStates:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(self, s: ReplicaState) -> None:
        """Record a node's report (the last one a node sent of an allocation stands)."""
        rows.upsert(
            self.conn,
            replica_states,
            [
                {
                    "allocation_id": s.allocation_id,
                    "node_id": s.node_id,
                    "state": s.state,
                    "exit_code": s.exit_code,
                    "problem": s.problem,
                    "detail": s.detail,
                    "restarts": s.restarts,
                    "address": s.address,
                    "updated_at": s.updated_at,
                }
            ],
            key=["allocation_id", "node_id"],
        )

    def of_allocations(self, allocation_ids: Sequence[str]) -> dict[str, list[ReplicaState]]:
        """Per allocation, what each node reported of its container (an empty list: none yet)."""
        out: dict[str, list[ReplicaState]] = {a: [] for a in allocation_ids}
        if not allocation_ids:
            return out
        stmt = select(replica_states).where(replica_states.c.allocation_id.in_(list(allocation_ids)))
        for r in rows.rows(self.conn, stmt):
            out[r["allocation_id"]].append(_state(r))
        return out

    def problems(self, limit: int = 1000) -> list[ReplicaState]:
        """The states that carry a problem (crash-looping, image-not-found, create-failed), oldest
        first: what `doctor` lists."""
        stmt = (
            select(replica_states)
            .where(replica_states.c.problem.is_not(None), replica_states.c.state != "removed")
            .order_by(replica_states.c.updated_at, replica_states.c.allocation_id)
            .limit(limit)
        )
        return [_state(r) for r in rows.rows(self.conn, stmt)]

    def ready_on(self, node_id: str) -> list[ReplicaState]:
        """What the node last said `ready`, by allocation."""
        stmt = (
            select(replica_states)
            .where(replica_states.c.node_id == node_id, replica_states.c.state == "ready")
            .order_by(replica_states.c.allocation_id)
        )
        return [_state(r) for r in rows.rows(self.conn, stmt)]

    def forget_on(self, allocation_id: str, node_id: str) -> None:
        """Drop what one node said of an allocation's container (it removed it)."""
        self.conn.execute(
            delete(replica_states).where(
                replica_states.c.allocation_id == allocation_id, replica_states.c.node_id == node_id
            )
        )

    def forget(self, allocation_ids: Sequence[str]) -> None:
        """Drop what nodes said of allocations that ended (their containers are gone)."""
        if allocation_ids:
            self.conn.execute(
                delete(replica_states).where(replica_states.c.allocation_id.in_(list(allocation_ids)))
            )
