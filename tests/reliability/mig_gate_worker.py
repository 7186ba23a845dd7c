"""Processes for the reconciler-replica test: a replica that reconciles until no gate is left, and
one that takes every lease and then hangs (to be killed). Each has its own store, as a server or a
`better-compute reconcile` process does, and the production clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection

from sqlalchemy import text

from better_compute.domain.gate import mig_gate as rules
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store


def _now() -> datetime:
    return datetime.now(UTC)


def _gates_left(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM capacity_mig_layouts")).scalar_one())


def replica(url: str, owner: str, lease_s: float, give_up_s: float) -> list[tuple[str, str, str, float]]:
    """Reconcile as `owner` until every gate is gone (or `give_up_s` passed); the steps it took,
    as (node, step, owner, Unix time), waits left out."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    reconciler = Reconciler(store, _now, owner, timedelta(seconds=lease_s), batch=5)
    taken: list[tuple[str, str, str, float]] = []
    deadline = time.monotonic() + give_up_s
    try:
        while _gates_left(store) and time.monotonic() < deadline:
            for node, step in reconciler.tick().items():
                if not isinstance(step, rules.Wait):
                    taken.append((node, type(step).__name__, owner, time.time()))
            time.sleep(0.02)
    finally:
        store.close()
    return taken


def hoarder(url: str, lease_s: float, out: Connection) -> None:
    """Lease every gated node, say until when, and hang (a replica that died holding them)."""
    store = Store.open(url, migrate_schema=False, pool_size=1)
    now = _now()
    with store.begin() as tx:
        held = tx.mig_layouts.lease("hoarder", now, now + timedelta(seconds=lease_s), 10_000)
    out.send((held, (now + timedelta(seconds=lease_s)).timestamp()))
    time.sleep(3600)
