"""Engines for the two stores: SQLite (embedded default) and PostgreSQL (production).

SQLite writers are serialised with `BEGIN IMMEDIATE`, so a transaction that checks for overlaps and then
writes cannot interleave with another writer. PostgreSQL relies on its exclusion constraint instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import DateTime, Engine, TypeDecorator, create_engine, event
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.pool import QueuePool

READ_ONLY = "bc_read_only"
"""Execution option marking a connection whose transaction only reads."""
SINGLE_STATEMENT = "bc_single_statement"
"""Execution option marking a connection whose one write is atomic by itself (no BEGIN on SQLite)."""


def normalise_url(url: str) -> str:
    """Accept libpq-style URLs and route them to psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def describe(url: URL) -> str:
    """The database in words, for the server's log: `the SQLite database /srv/bc.db`, `the PostgreSQL
    database compute on db.internal:5432` (never its password)."""
    if url.get_backend_name() == "sqlite":
        return f"the SQLite database {url.database or ':memory:'}"
    return f"the PostgreSQL database {url.database} on {url.host or 'localhost'}:{url.port or 5432}"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(
    url: str, *, pool_size: int = 10, synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL"
) -> Engine:
    """An engine for `url`; on SQLite, `synchronous` is how commits wait for the disk (FULL: each
    commit survives a power loss; NORMAL and OFF are for a throwaway store: NORMAL still syncs at
    each WAL checkpoint, OFF never)."""
    url = normalise_url(url)
    if is_sqlite(url):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            poolclass=QueuePool,
            pool_size=pool_size,
            max_overflow=pool_size,
            # Every unit of work ends in an explicit commit or rollback (storage/store.py), so the
            # pool's own rollback on check-in would only cost a call per transaction.
            pool_reset_on_return=None,
        )
        _sqlite_pragmas(engine, synchronous)
        return engine
    # No pre-ping: it costs a round trip per transaction; stale connections are recycled instead.
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size * 2, pool_recycle=1800)


def _sqlite_pragmas(engine: Engine, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        # A fleet's atoms run to hundreds of MB; the default 2,000-page cache would send every
        # booking's atom look-up to the OS. 64 MiB of cache and a memory map keep them in memory.
        cur.execute("PRAGMA cache_size=-65536")
        cur.execute("PRAGMA mmap_size=1073741824")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock up front, so a check-then-insert cannot interleave; readers
        # take a plain snapshot and never wait for a writer (WAL).
        options = conn.get_execution_options()
        if options.get(SINGLE_STATEMENT, False):
            return  # each statement is its own transaction
        conn.connection.driver_connection.execute(
            "BEGIN" if options.get(READ_ONLY, False) else "BEGIN IMMEDIATE"
        )


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python on both stores (SQLite keeps naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
