"""The GPU state history: periods of each GPU's state (`domain.fleet.gpu_states`), and the bookings on the
GPUs of a pool over a range, read together for accounting."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update

from better_compute.domain.fleet.gpu_states import GpuPeriod, GpuState, StateChange
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import is_partition_change
from better_compute.domain.metering.accounting import Held
from better_compute.domain.metering.metering import parse_share
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import atoms, bookings, gpu_states

_CHUNK = 1000
"""GPU ids per statement: keeps the parameter list far below SQLite's limit."""


def _period(r: Mapping[str, Any]) -> GpuPeriod:
    shares = tuple(sorted((atom_id, parse_share(text)) for atom_id, text in (r["shares"] or {}).items()))
    state = GpuState(r["gpu_id"], r["node_id"], r["pool_id"], bool(r["healthy"]), bool(r["cordoned"]), shares)
    return GpuPeriod(state, Window(r["valid_from"], r["valid_to"]))


def _row(state: GpuState, at: datetime) -> dict[str, Any]:
    return {
        "gpu_id": state.gpu_id,
        "node_id": state.node_id,
        "pool_id": state.pool_id,
        "healthy": state.healthy,
        "cordoned": state.cordoned,
        "shares": {atom_id: str(s) for atom_id, s in state.shares},
        "valid_from": at,
        "valid_to": None,
    }


def _overlapping(window: Window, pool_ids: Sequence[str] | None) -> list[Any]:
    where: list[Any] = [or_(gpu_states.c.valid_to.is_(None), gpu_states.c.valid_to > window.start)]
    if window.end is not None:
        where.append(gpu_states.c.valid_from < window.end)
    if pool_ids is not None:
        where.append(gpu_states.c.pool_id.in_(list(pool_ids)))
    return where


class SqlGpuStates:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def open_of(self, gpu_ids: Sequence[str]) -> dict[str, GpuPeriod]:
        out: dict[str, GpuPeriod] = {}
        ids = sorted(set(gpu_ids))
        for i in range(0, len(ids), _CHUNK):
            stmt = select(gpu_states).where(
                gpu_states.c.gpu_id.in_(ids[i : i + _CHUNK]), gpu_states.c.valid_to.is_(None)
            )
            out.update((p.state.gpu_id, p) for p in map(_period, rows.rows(self.conn, stmt)))
        return out

    def write(self, changes: Sequence[StateChange]) -> None:
        # Open periods end in one statement per instant and chunk (a fleet's first report changes
        # thousands of GPUs at once; a statement per GPU was most of its ingest).
        ending: dict[datetime, list[str]] = defaultdict(list)
        for change in changes:
            ending[change.at].append(change.gpu_id)
        for at, gpu_ids in ending.items():
            for i in range(0, len(gpu_ids), _CHUNK):
                self.conn.execute(
                    update(gpu_states)
                    .where(gpu_states.c.gpu_id.in_(gpu_ids[i : i + _CHUNK]), gpu_states.c.valid_to.is_(None))
                    .values(valid_to=at)
                )
        new = [_row(c.state, c.at) for c in changes if c.state is not None]
        rows.insert_all(self.conn, gpu_states, new)

    def during(self, pool_ids: Sequence[str] | None, window: Window) -> list[GpuPeriod]:
        stmt = select(gpu_states).where(*_overlapping(window, pool_ids)).order_by(gpu_states.c.id)
        return [_period(r) for r in rows.rows(self.conn, stmt)]

    def held_during(self, pool_ids: Sequence[str] | None, window: Window) -> list[Held]:
        on_gpus = select(gpu_states.c.gpu_id).where(*_overlapping(window, pool_ids))
        of_atoms = select(atoms.c.id).where(atoms.c.gpu_id.in_(on_gpus))
        where: list[Any] = [
            bookings.c.atom_id.in_(of_atoms),
            bookings.c.state == "live",
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > window.start),
        ]
        if window.end is not None:
            where.append(bookings.c.starts_at < window.end)
        stmt = select(
            bookings.c.gpu_id,
            bookings.c.atom_id,
            bookings.c.starts_at,
            bookings.c.ends_at,
            bookings.c.allocation_id,
        ).where(and_(*where))
        return [
            Held(gpu_id, atom_id, Window(start, end), is_partition_change(allocation))
            for gpu_id, atom_id, start, end, allocation in self.conn.execute(stmt)
        ]
