"""Asking a node's agent: which node holds an allocation now, and how the server reaches that node's
agent (domain.fleet.node_agents). The read itself goes over HTTP, so it is the caller's adapter's
(`AgentLogs`), outside any transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from better_compute.domain.fleet.node_agents import LogSource, no_agent
from better_compute.service.fleet.ports import FleetTx


class AgentLogs(Protocol):
    """Reads `tail` lines of the allocation's container log from the node's agent: the text, at most
    `domain.fleet.node_agents.LOG_BYTES_MAX` bytes; raises `AgentUnavailable` (the agent did not
    answer) or NOT_FOUND (the node has no container for it)."""

    def __call__(self, source: LogSource, tail: int) -> str: ...


def node_of_allocation(tx: FleetTx, allocation_id: str, now: datetime) -> str | None:
    """The node whose atoms the allocation's live bookings hold at `now` (the first by id, should they
    span several), or None: it holds none now."""
    gpus = {
        b.gpu_id
        for b in tx.ledger.allocation_bookings(allocation_id)
        if b.state == "live" and b.span.start <= now and (b.span.end is None or now < b.span.end)
    }
    nodes = sorted({g.node_id for g in (tx.gpus.get(gid) for gid in gpus) if g is not None})
    return nodes[0] if nodes else None


def source_on(tx: FleetTx, allocation_id: str, node_id: str) -> LogSource:
    """Where to read the allocation's log on `node_id`: its agent (UNAVAILABLE when the node never
    said it serves one)."""
    agent = tx.node_agents.get(node_id)
    if agent is None:
        raise no_agent(node_id)
    return LogSource(allocation_id, node_id, agent)
