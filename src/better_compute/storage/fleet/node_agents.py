"""The node agents repository: where each node's agent listens and the token it answers to."""

from __future__ import annotations

from sqlalchemy import Connection, select

from better_compute.domain.fleet.node_agents import NodeAgent
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import node_agents


class SqlNodeAgents:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(self, agent: NodeAgent) -> None:
        """Record a node's `Agent` report (the last one stands: a restarted `bcd` has a new token)."""
        rows.upsert(
            self.conn,
            node_agents,
            [
                {
                    "node_id": agent.node_id,
                    "url": agent.url,
                    "token": agent.token,
                    "updated_at": agent.updated_at,
                }
            ],
            key=["node_id"],
        )

    def get(self, node_id: str) -> NodeAgent | None:
        found = (
            self.conn.execute(select(node_agents).where(node_agents.c.node_id == node_id)).mappings().first()
        )
        if found is None:
            return None
        return NodeAgent(found["node_id"], found["url"], found["token"], found["updated_at"])
