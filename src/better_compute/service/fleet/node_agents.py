"""Asking a node's agent: which node holds an allocation now, and how the server reaches that node's
agent (domain.fleet.node_agents). The read itself goes over HTTP, so it is the caller's adapter's
(`AgentLogs`), outside any transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from better_compute.domain.fleet.events import ReplicaExec, ReplicaExecFinished
from better_compute.domain.fleet.node_agents import ExecResult, LogSource, no_agent
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort

EXEC_EVENT_COMMAND_MAX = 256
"""The most characters of a command's first argument an audit event keeps."""


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


def source_on(
    tx: FleetTx, allocation_id: str, node_id: str, tenant_id: str | None = None, serves: str = "logs"
) -> LogSource:
    """Where to read the allocation's log (or run a command in its container: `serves` "exec") on
    `node_id`: its agent (UNAVAILABLE when the node never said it serves one)."""
    agent = tx.node_agents.get(node_id)
    if agent is None:
        raise no_agent(node_id, serves)
    return LogSource(allocation_id, node_id, agent, tenant_id)


def record_exec(
    store: StorePort[FleetTx], principal: Principal, source: LogSource, argv: Sequence[str], now: datetime
) -> None:
    """Log `replica.exec` for a command about to be sent to the allocation's container: who, where,
    its first argument only. Its own transaction, committed BEFORE the node is asked: every command
    sent is on the log, even when the server stops before the answer comes."""
    with store.begin() as tx:
        tx.events.append(
            ReplicaExec(
                source.allocation_id,
                node=source.node_id,
                tenant_id=source.tenant_id,
                by=principal.credential_id,
                command=argv[0][:EXEC_EVENT_COMMAND_MAX],
            ),
            now,
        )


def record_exec_finished(
    store: StorePort[FleetTx],
    principal: Principal,
    source: LogSource,
    argv: Sequence[str],
    result: ExecResult,
    now: datetime,
) -> None:
    """Log `replica.exec_finished`: how a command `record_exec` logged ended (its exit code, whether
    it timed out). Its own transaction, after the exec: the exec is the node's doing, which no
    rollback undoes."""
    with store.begin() as tx:
        tx.events.append(
            ReplicaExecFinished(
                source.allocation_id,
                node=source.node_id,
                tenant_id=source.tenant_id,
                by=principal.credential_id,
                command=argv[0][:EXEC_EVENT_COMMAND_MAX],
                exit_code=result.exit_code,
                timed_out=result.timed_out,
            ),
            now,
        )
