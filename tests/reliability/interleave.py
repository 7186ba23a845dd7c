"""Forcing interleavings on PostgreSQL: how many sessions wait on a lock, and waiting for a racer to
either finish or block (the only waits these tests make; they never decide an outcome)."""

from __future__ import annotations

import threading

from sqlalchemy import text

from better_compute.storage.store import Store


def libpq_url(store: Store) -> str:
    """The store's database as a URL psycopg connects to, for a session of the test's own."""
    return store.engine.url.render_as_string(hide_password=False).replace("postgresql+psycopg", "postgresql")


def lock_waiters(store: Store) -> int:
    """Sessions of the store's database that wait on a lock now."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def until_blocked(store: Store, racer: threading.Thread, waiters: int = 1, polls: int = 400) -> None:
    """Return once `racer` has finished or `waiters` sessions wait on a lock (polled every 50 ms)."""
    for _ in range(polls):
        if not racer.is_alive() or lock_waiters(store) >= waiters:
            return
        racer.join(0.05)
